// Memory browser: episodes, memories, knowledge assets and the knowledge tree of the org as the signed-in key sees them,
// filtered and paged by the list endpoints' keyset cursors (a page costs the same at any size).
import {get} from "./api.js";
import {h, field, input, select, table, when, short, itemLink, values, section, note} from "./dom.js";

const state = {type: "memory", filters: {}, cursors: [""], knowledgePath: ""};
const KINDS = {memory: ["", "fact", "rule", "preference", "procedure", "schema_hint"],
  episode: ["", "conversation", "trajectory", "feedback", "note"], asset: ["", "document", "table_schema", "glossary"]};
const STATUSES = {memory: ["active", "quarantined", "superseded"], asset: ["active", "dropped"]};
// Each listed type: its list endpoint, its plural, its text, its state and its time.
const LISTS = {
  memory: {path: "/v1/memories", plural: "memories", text: (x) => x.text,
    state: ["status", (x) => `${x.status} v${x.version}`], at: (x) => x.recorded_at},
  episode: {path: "/v1/episodes", plural: "episodes", text: (x) => x.content,
    state: ["outcome", (x) => x.outcome || ""], at: (x) => x.occurred_at},
  asset: {path: "/v1/knowledge/assets", plural: "knowledge assets", text: (x) => `${x.title} · ${x.source_uri}`,
    state: ["status", (x) => x.status], at: (x) => x.created_at},
};

function filterForm(ctx) {
  const f = state.filters;
  const form = h("form", {class: "filters", "aria-label": "filters"},
    field("Type", select("type", [["memory", "memories"], ["episode", "episodes"], ["asset", "knowledge assets"],
      ["knowledge", "knowledge tree"]], state.type)),
    state.type === "knowledge" ? null : [
      field("Kind", select("kind", KINDS[state.type], f.kind || "")),
      field("Owner id", input("owner", {value: f.owner || "", size: 12})),
      field("Visibility", select("visibility", ["", "private", "group", "org"], f.visibility || "")),
      field("Group", input("group", {value: f.group || "", size: 8})),
      field("Label", input("label", {value: f.label || "", size: 8})),
      STATUSES[state.type] ? field("Status", select("status", STATUSES[state.type], f.status || "active")) : null,
      field("Since", input("since", {type: "datetime-local", step: 1, value: f.since || ""})),
      field("Until", input("until", {type: "datetime-local", step: 1, value: f.until || ""})),
      field("Per page", select("limit", ["25", "50", "100", "200"], f.limit || "50")),
    ],
    h("button", {type: "submit"}, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = values(form);
    state.type = v.type; delete v.type;
    state.filters = v; state.cursors = [""];
    ctx.rerender();
  });
  form.querySelector("select[name=type]").addEventListener("change", (ev) => {
    state.type = ev.target.value; state.filters = {}; state.cursors = [""]; ctx.rerender();
  });
  return form;
}

function iso(local) { return local ? new Date(local).toISOString() : undefined; }

async function itemsPage(ctx) {
  const f = state.filters, cursor = state.cursors[state.cursors.length - 1], list = LISTS[state.type];
  const page = await get(list.path, {...f, since: iso(f.since), until: iso(f.until), cursor, as_of: ctx.asOf});
  const cols = [["id", (x) => itemLink(state.type, x.id)], ["kind", (x) => x.kind],
    ["text", (x) => h("span", {class: "text"}, list.text(x))], ["visibility", (x) => x.visibility],
    ["groups", (x) => x.groups.join(", ")], ["labels", (x) => x.labels.join(", ")], ["owner", (x) => short(x.owner_id)],
    list.state, ["at", (x) => when(list.at(x))]];
  const prev = h("button", {type: "button", disabled: state.cursors.length < 2}, "Previous page");
  const next = h("button", {type: "button", disabled: !page.next_cursor}, "Next page");
  prev.addEventListener("click", () => { state.cursors.pop(); ctx.rerender(); });
  next.addEventListener("click", () => { state.cursors.push(page.next_cursor); ctx.rerender(); });
  return [table(`${page.items.length} ${list.plural} (page ${state.cursors.length})`,
    cols, page.items, {id: "items", class: "items", "data-count": page.items.length}),
  h("div", {class: "pager"}, prev, next)];
}

async function knowledge(ctx) {
  const t = await get("/v1/knowledge/tree", {path: state.knowledgePath || undefined, as_of: ctx.asOf});
  const open = (path) => h("button", {type: "button", class: "link", onclick: () => { state.knowledgePath = path; ctx.rerender(); }}, path || "(root)");
  const up = state.knowledgePath ? state.knowledgePath.split("/").slice(0, -1).join("/") : null;
  return [h("p", {}, "Node: ", h("strong", {}, t.node.name || "(root)"), " ", up !== null ? open(up) : null),
    table(`${t.children.length} children${t.truncated ? " (more: narrow the path)" : ""}`,
      [["name", (c) => open(c.path)], ["kind", (c) => c.kind], ["summary", (c) => c.summary || ""]],
      t.children, {id: "items", class: "items", "data-count": t.children.length})];
}

export async function render(ctx) {
  const body = state.type === "knowledge" ? await knowledge(ctx) : await itemsPage(ctx);
  return section("Memory browser", filterForm(ctx),
    ctx.asOf && state.type === "episode" ? note("As of: the episodes stored by then that still exist (episodes never change).") : null,
    ctx.asOf && state.type === "knowledge" ? note("As of: the tree's nodes written by then, of the assets still active today.") : null,
    ...body);
}
