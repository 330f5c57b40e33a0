// The compliance page's script: served as a file (app/ui/endpoints.py), so the CSP allows
// scripts from this origin only and never inline ones.
"use strict";
const COLORS = {private: "#d9534f", group: "#f0ad4e", org: "#5cb85c"};
const nodes = new Map(), edges = new Map();
const $ = (id) => document.getElementById(id);
function key() { return $("key").value.trim(); }
async function api(path) {
  const r = await fetch(path, {headers: {"Authorization": "Bearer " + key()}});
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.code) || r.status);
  return body;
}
function nodeKey(n) { return n.type + ":" + n.id; }
function label(n) {
  if (n.redacted) return n.type + " (redacted)";
  if (n.deleted) return n.type + " (deleted)";
  const t = (n.text || "").slice(0, 28);
  return n.type + ": " + t + ((n.text || "").length > 28 ? "…" : "");
}
function asOf() { const t = $("asof").value.trim(); return t ? "&as_of=" + encodeURIComponent(t) : ""; }
async function expand(type, id) {
  const g = await api(`/v1/lineage/${type}/${id}?direction=both&depth=3${asOf()}`);
  g.nodes.forEach((n) => nodes.set(nodeKey(n), Object.assign(nodes.get(nodeKey(n)) || {}, n)));
  g.edges.forEach((e) => edges.set(nodeKey(e.from) + ">" + nodeKey(e.to) + ">" + e.relation, e));
  draw(type + ":" + id);
}
function layers(root) {
  // Longest-path layering: sources to the right of what was derived from them.
  const depth = new Map([[root, 0]]);
  for (let i = 0; i < nodes.size; i++) {
    edges.forEach((e) => {
      const f = nodeKey(e.from), t = nodeKey(e.to);
      if (depth.has(f) && (!depth.has(t) || depth.get(t) < depth.get(f) + 1) && depth.get(f) < 12) depth.set(t, depth.get(f) + 1);
      if (depth.has(t) && !depth.has(f)) depth.set(f, depth.get(t) - 1);
    });
  }
  nodes.forEach((_, k) => { if (!depth.has(k)) depth.set(k, 0); });
  return depth;
}
const SVG = "http://www.w3.org/2000/svg";
// Every element is built with createElementNS and every value set as an attribute or a text
// node: nothing is ever parsed as markup, whatever an item's text or id holds.
function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, String(v)));
  if (text !== undefined) e.appendChild(document.createTextNode(text));
  return e;
}
function draw(root) {
  const svg = $("graph"), W = svg.clientWidth || 800, H = 560;
  const depth = layers(root), cols = new Map();
  depth.forEach((d, k) => { if (!cols.has(d)) cols.set(d, []); cols.get(d).push(k); });
  const ds = [...cols.keys()].sort((a, b) => a - b), pos = new Map();
  ds.forEach((d, ci) => cols.get(d).forEach((k, ri) => pos.set(k, {
    x: 150 + ci * ((W - 300) / Math.max(1, ds.length - 1 || 1)), y: 40 + (ri + 0.5) * ((H - 60) / cols.get(d).length)})));
  const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto"});
  marker.appendChild(el("path", {d: "M0,0L10,5L0,10z", fill: "#889"}));
  const defs = el("defs", {});
  defs.appendChild(marker);
  const parts = [defs];
  edges.forEach((e) => {
    const a = pos.get(nodeKey(e.from)), b = pos.get(nodeKey(e.to));
    if (!a || !b) return;
    parts.push(el("line", {x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: "#889", "marker-end": "url(#arrow)"}));
    parts.push(el("text", {class: "edge-label", x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 - 4, "text-anchor": "middle"}, e.relation));
  });
  nodes.forEach((n, k) => {
    const p = pos.get(k), c = (n.redacted || n.deleted) ? "#999" : COLORS[n.visibility] || "#999";
    const g = el("g", {class: "node", "data-key": k, "data-type": n.type, "data-id": n.id,
                       "data-visibility": n.visibility || "", transform: `translate(${p.x},${p.y})`});
    g.appendChild(el("circle", {r: k === root ? 13 : 10, fill: c, stroke: "#1d2330", "stroke-width": k === root ? 2 : 1}));
    g.appendChild(el("text", {y: 24, "text-anchor": "middle"}, label(n)));
    g.addEventListener("click", () => { show(nodes.get(k)); expand(n.type, n.id).catch(err); });
    parts.push(g);
  });
  svg.replaceChildren(...parts);
  svg.dataset.nodes = String(nodes.size);
  svg.dataset.edges = String(edges.size);
}
function show(n) {
  const d = $("detail");
  d.textContent = n.redacted ? `${n.type} ${n.id}: you may not read this item` :
    `${n.type} ${n.id} · ${n.visibility || ""} · labels [${(n.labels || []).join(", ")}] · ${n.status || ""}\n${n.text || ""}`;
  history(n.type, n.id).catch(err);
}
function rows(table, list, cells, onClick) {
  const t = $(table);
  while (t.rows.length > 1) t.deleteRow(1);
  list.forEach((x) => {
    const r = t.insertRow();
    cells(x).forEach((c) => { r.insertCell().textContent = c; });
    if (onClick) { r.classList.add("clickable"); r.addEventListener("click", () => onClick(x)); }
  });
}
async function history(type, id) {
  const r = await api(`/v1/retrievals?item_id=${id}`);
  rows("retrievals", r.retrievals, (x) => [x.at.slice(0, 19), x.actor.slice(0, 8), x.kind, x.score == null ? "" : x.score.toFixed(4)],
       (x) => { $("asof").value = x.at; start().catch(err); });  // the items as they were when retrieved
  try {
    const a = await api(`/v1/audit?target_id=${id}&limit=200`);
    rows("audit", a.events, (e) => [e.seq, e.at.slice(0, 19), e.action, (e.actor || "system").slice(0, 8)]);
  } catch (e) { rows("audit", [{seq: "", at: "", action: "audit trail needs the auditor role", actor: ""}], (x) => [x.seq, x.at, x.action, x.actor]); }
}
function err(e) { $("status").textContent = "error: " + e.message; }
async function start() {
  nodes.clear(); edges.clear();
  const type = $("type").value, id = $("item").value.trim();
  $("status").textContent = "loading…";
  await expand(type, id);
  const root = nodes.get(type + ":" + id);
  if (root) show(root);
  $("status").textContent = `${nodes.size} nodes, ${edges.size} edges`;
}
$("go").addEventListener("click", () => start().catch(err));
// Deep link: /ui/#key=...&type=memory&id=...[&as_of=ISO time] (the fragment never reaches the server).
const h = new URLSearchParams(location.hash.slice(1));
if (h.get("key")) {
  $("key").value = h.get("key"); $("type").value = h.get("type") || "memory"; $("item").value = h.get("id") || "";
  $("asof").value = h.get("as_of") || ""; start().catch(err);
}
