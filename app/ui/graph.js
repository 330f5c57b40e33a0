// The lineage graph of one item (GET /v1/lineage): an SVG built node by node with
// createElementNS; every value is an attribute or a text node, never markup.
import {get} from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = {private: "#d9534f", group: "#f0ad4e", org: "#5cb85c"};

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, String(v)));
  if (text !== undefined) e.appendChild(document.createTextNode(text));
  return e;
}
export const nodeKey = (n) => n.type + ":" + n.id;
function label(n) {
  if (n.redacted) return n.type + " (redacted)";
  if (n.deleted) return n.type + " (deleted)";
  const t = n.text || "";
  return n.type + ": " + t.slice(0, 28) + (t.length > 28 ? "…" : "");
}

// Longest-path layering: sources to the right of what was derived from them.
function layers(root, nodes, edges) {
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

// A graph that grows as nodes are expanded; `onSelect(node)` when one is chosen (click or Enter).
export function lineageGraph(asOf, onSelect) {
  const nodes = new Map(), edges = new Map();
  const svg = el("svg", {id: "graph", role: "group", "aria-label": "lineage graph", "data-nodes": 0, "data-edges": 0});
  let root = "";
  async function expand(type, id) {
    const g = await get(`/v1/lineage/${encodeURIComponent(type)}/${encodeURIComponent(id)}`,
      {direction: "both", depth: 3, as_of: asOf});
    g.nodes.forEach((n) => nodes.set(nodeKey(n), Object.assign(nodes.get(nodeKey(n)) || {}, n)));
    g.edges.forEach((e) => edges.set(nodeKey(e.from) + ">" + nodeKey(e.to) + ">" + e.relation, e));
    root = root || type + ":" + id;
    draw();
    return g;
  }
  function draw() {
    const W = svg.clientWidth || 800, H = 420;
    const depth = layers(root, nodes, edges), cols = new Map();
    depth.forEach((d, k) => { if (!cols.has(d)) cols.set(d, []); cols.get(d).push(k); });
    const ds = [...cols.keys()].sort((a, b) => a - b), pos = new Map();
    ds.forEach((d, ci) => cols.get(d).forEach((k, ri) => pos.set(k, {
      x: 120 + ci * ((W - 240) / Math.max(1, ds.length - 1)), y: 30 + (ri + 0.5) * ((H - 50) / cols.get(d).length)})));
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
      const g = el("g", {class: "node", tabindex: 0, role: "button", "aria-label": label(n), "data-key": k, "data-type": n.type,
        "data-id": n.id, "data-visibility": n.visibility || "", transform: `translate(${p.x},${p.y})`});
      g.appendChild(el("circle", {r: k === root ? 13 : 10, fill: c, stroke: "#1d2330", "stroke-width": k === root ? 2 : 1}));
      g.appendChild(el("text", {y: 24, "text-anchor": "middle"}, label(n)));
      const pick = () => { onSelect(nodes.get(k)); if (!n.redacted && !n.deleted) expand(n.type, n.id).catch(() => {}); };
      g.addEventListener("click", pick);
      g.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); pick(); } });
      parts.push(g);
    });
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.replaceChildren(...parts);
    svg.setAttribute("data-nodes", String(nodes.size));
    svg.setAttribute("data-edges", String(edges.size));
  }
  return {svg, expand, nodes, edges};
}
