// One item: its fields, what it was derived from and what was derived from it, its lineage graph
// (click or Enter on a node to expand it), who retrieved it, its audit trail, and for memories
// their versions (those the key may see, newest first, each a link) and declassification as an
// audited act with its reason; for knowledge assets their fields, status and chunk count. #/item/<type>/<id>.
import {get, post} from "./api.js";
import {h, field, input, select, table, when, short, itemLink, values, section, note} from "./dom.js";
import {lineageGraph, nodeKey} from "./graph.js";

const FIELDS = ["id", "kind", "status", "version", "root_id", "visibility", "groups", "labels", "owner_id", "confidence",
  "session_id", "outcome", "occurred_at", "recorded_at", "valid_from", "valid_to", "superseded_at", "agent_id",
  "title", "source_uri", "chunks", "content_hash", "created_at", "updated_at"];
// Each type with an item read: its path and its text.
const READS = {memory: ["/v1/memories/", (x) => x.text], episode: ["/v1/episodes/", (x) => x.content],
  asset: ["/v1/knowledge/assets/", (x) => x.title]};

function details(x) {
  const rows = FIELDS.filter((k) => x[k] !== undefined && x[k] !== null)
    .map((k) => [h("dt", {}, k), h("dd", {"data-key": k}, Array.isArray(x[k]) ? x[k].join(", ") : String(x[k]))]);
  if (x.metadata && Object.keys(x.metadata).length) rows.push([h("dt", {}, "metadata"), h("dd", {"data-key": "metadata", class: "text"}, JSON.stringify(x.metadata))]);
  if (x.utility) rows.push([h("dt", {}, "utility"), h("dd", {}, `helpful ${x.utility.helpful} · wrong ${x.utility.wrong} · estimate ${x.utility.estimate}`)]);
  return h("dl", {class: "fields"}, rows.flat());
}

function edgesTable(caption, edges, other, id) {
  return table(caption, [["relation", (e) => e.relation], ["item", (e) => itemLink(other(e).type, other(e).id, `${other(e).type} ${short(other(e).id)}`)],
    ["at", (e) => when(e.at)]], edges.map((e) => ({...e, id: other(e).id})), {id});
}

async function versions(id, asOf) {
  try {
    const r = await get(`/v1/memories/${encodeURIComponent(id)}/versions`, {as_of: asOf});
    return table(`Versions (${r.items.length}, newest first)`, [["version", (m) => m.id === id ? `v${m.version} (this one)` :
      itemLink("memory", m.id, `v${m.version}`)], ["status", (m) => m.status], ["recorded", (m) => when(m.recorded_at)],
    ["visibility", (m) => m.visibility], ["text", (m) => h("span", {class: "text"}, m.text)]], r.items, {id: "versions"});
  } catch (e) { return note(e.message); }
}

function declassifyForm(id, ctx) {
  const form = h("form", {class: "filters", "aria-label": "declassify"},
    field("New visibility", select("visibility", ["private", "group", "org"], "org")),
    field("Groups (comma-separated)", input("groups", {size: 12})),
    field("Labels (comma-separated)", input("labels", {size: 12})),
    field("Reason (recorded in the audit log)", input("reason", {size: 30, required: true})),
    h("button", {type: "submit"}, "Declassify"));
  const out = h("p", {role: "status"});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = values(form), list = (s) => (s || "").split(",").map((x) => x.trim()).filter(Boolean);
    try {
      const m = await post(`/v1/memories/${encodeURIComponent(id)}/declassify`,
        {reason: v.reason, visibility: v.visibility, groups: list(v.groups), labels: list(v.labels)});
      out.textContent = `declassified: now ${m.visibility} [${m.labels.join(", ")}]`;
      ctx.rerender();
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

export async function render(ctx) {
  const [type, id] = ctx.args;
  const read = READS[type];
  const x = read ? await get(read[0] + encodeURIComponent(id), {as_of: ctx.asOf}) : null;
  const detail = h("p", {id: "node-detail", class: "text"});
  const graph = lineageGraph(ctx.asOf, (n) => {
    detail.textContent = n.redacted ? `${n.type} ${n.id}: you may not read this item` :
      `${n.type} ${n.id} · ${n.visibility || ""} · labels [${(n.labels || []).join(", ")}] · ${n.status || ""} · ${n.text || ""}`;
  });
  const g = await graph.expand(type, id);
  const me = type + ":" + id;
  const sources = g.edges.filter((e) => nodeKey(e.from) === me), derived = g.edges.filter((e) => nodeKey(e.to) === me);
  const retrievals = await get("/v1/retrievals", {item_id: id}).catch(() => ({retrievals: []}));
  let audit;
  try {
    const a = await get("/v1/audit", {target_id: id, limit: 200});
    audit = table("Audit trail", [["seq", (e) => e.seq], ["at", (e) => when(e.at)], ["action", (e) => e.action],
      ["actor", (e) => short(e.actor) || "system"]], a.events, {id: "item-audit"});
  } catch (e) { audit = note("The audit trail needs the auditor role."); }
  const text = x ? read[1](x) : "";
  return h("div", {class: "item"},
    h("div", {class: "cols"},
      section(`${type} ${short(id)}`, h("p", {}, h("a", {href: "#/browse"}, "← back to the list")),
        x ? h("blockquote", {id: "item-text", class: "text"}, text) : note("No fields to show for this type; its lineage follows."),
        x ? details(x) : null),
      section("Lineage", h("div", {class: "legend"}, ["private", "group", "org", "redacted / deleted"].map((v) =>
        h("span", {}, h("i", {class: "dot " + v.split(" ")[0]}), v))), graph.svg, detail)),
    section("Sources and derived items", h("div", {class: "cols"},
      edgesTable("Sources (derived from)", sources, (e) => e.to, "sources"),
      edgesTable("Derived items", derived, (e) => e.from, "derived"))),
    type === "memory" && x ? section("Versions", await versions(id, ctx.asOf)) : null,
    type === "memory" && x ? section("Declassify", ...declassifyForm(id, ctx)) : null,
    section("Retrievals and audit", table("Who retrieved it", [["at", (r) => when(r.at)], ["actor", (r) => short(r.actor)],
      ["kind", (r) => r.kind], ["score", (r) => r.score == null ? "" : r.score.toFixed(4)]], retrievals.retrievals, {id: "item-retrievals"}),
    audit));
}
