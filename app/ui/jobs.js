// Jobs of the org (members: their own) with state, progress and errors; start one of the kinds
// the API accepts — read from its OpenAPI document, so a new kind appears here without a change.
import {get, post, api} from "./api.js";
import {h, field, select, table, when, short, values, section, note} from "./dom.js";

const state = {cursors: [""], kind: ""};

export async function jobKinds() {
  const r = await fetch("/openapi.json");
  const doc = await r.json();
  return ((doc.components.schemas.JobIn || {}).properties || {}).kind?.enum || [];
}

function startForm(kinds, ctx) {
  const form = h("form", {class: "filters", "aria-label": "start a job"},
    field("Kind", select("kind", kinds, kinds[0])),
    field("Params (JSON)", h("textarea", {name: "params", rows: 2, cols: 40}, "{}")),
    h("button", {type: "submit"}, "Start"));
  const out = h("p", {role: "status"});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      const r = await post("/v1/jobs", {kind: v.kind, params: JSON.parse(v.params || "{}")});
      out.textContent = "started " + r.id;
      ctx.rerender();
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

export async function render(ctx) {
  const kinds = await jobKinds();
  const page = await get("/v1/jobs", {kind: state.kind, cursor: state.cursors[state.cursors.length - 1], limit: 50});
  const filter = select("filter", ["", ...kinds, "forget_user", "delete_episode"], state.kind);
  filter.addEventListener("change", () => { state.kind = filter.value; state.cursors = [""]; ctx.rerender(); });
  const cancel = (j) => ["queued", "running"].includes(j.status) ? h("button", {type: "button", onclick: async () => {
    try { await api("POST", `/v1/jobs/${j.id}/cancel`); ctx.rerender(); } catch (e) { ctx.status(e.message); }
  }}, "Cancel") : "";
  return h("div", {},
    section("Start a job", ...startForm(kinds, ctx)),
    section("Jobs", field("Kind", filter),
      table(`${page.items.length} jobs`, [["job", (j) => short(j.id)], ["kind", (j) => j.kind], ["status", (j) => j.status],
        ["progress", (j) => h("progress", {max: 1, value: j.progress, "aria-label": "progress"})], ["stats", (j) => JSON.stringify(j.stats)],
        ["error", (j) => h("span", {class: "text"}, j.error || "")], ["created", (j) => when(j.created_at)], ["", cancel]],
      page.items, {id: "jobs"}),
      h("div", {class: "pager"},
        h("button", {type: "button", disabled: state.cursors.length < 2, onclick: () => { state.cursors.pop(); ctx.rerender(); }}, "Previous page"),
        h("button", {type: "button", disabled: !page.next_cursor, onclick: () => { state.cursors.push(page.next_cursor); ctx.rerender(); }},
          "Next page"))),
    kinds.includes("reembed") ? null : note("Re-embedding appears here once the server accepts it."));
}
