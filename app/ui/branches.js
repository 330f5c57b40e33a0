// Branches and time: the org's branches, a branch's diff against what it forked from, promotion
// of selected changes, and switching the whole console into a branch (the Memscale-Branch header).
import {get, post, session} from "./api.js";
import {h, field, input, table, when, short, itemLink, values, section, note} from "./dom.js";

const state = {open: ""};

async function diffView(ctx) {
  if (!state.open) return note("Choose a branch to see what it changed.");
  const d = await get(`/v1/branches/${encodeURIComponent(state.open)}/diff`);
  const out = h("p", {role: "status"});
  const form = h("form", {"aria-label": "promote changes"},
    table(`${d.changes.length} changes in ${d.name}`, [
      ["promote", (c) => h("input", {type: "checkbox", name: "id", value: c.id, "aria-label": `promote ${c.type} ${c.id}`})],
      ["change", (c) => c.change], ["type", (c) => c.type], ["item", (c) => itemLink(c.type, c.id)],
      ["text", (c) => h("span", {class: "text"}, c.text || "")], ["at", (c) => when(c.at)]], d.changes, {id: "diff"}),
    h("button", {type: "submit"}, "Promote selected to main"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const ids = [...form.querySelectorAll("input[name=id]:checked")].map((x) => x.value);
    try {
      const r = await post(`/v1/branches/${encodeURIComponent(d.name)}/promote`, {ids});
      out.textContent = `promoted ${(r.promoted || ids).length}`;
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

function createForm(ctx) {
  const form = h("form", {class: "filters", "aria-label": "new branch"},
    field("Name", input("name", {size: 14, required: true})), field("From", input("from", {size: 10, placeholder: "main"})),
    field("At (fork as it stood then)", input("at", {type: "datetime-local", step: 1})), h("button", {type: "submit"}, "Create branch"));
  const out = h("p", {role: "status"});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      await post("/v1/branches", {name: v.name, ...(v.from ? {from: v.from} : {}), ...(v.at ? {at: new Date(v.at).toISOString()} : {})});
      ctx.rerender();
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

export async function render(ctx) {
  const list = await get("/v1/branches");
  const choose = (b) => h("button", {type: "button", class: "link", onclick: () => { state.open = b.name; ctx.rerender(); }}, b.name);
  const work = (b) => h("button", {type: "button", onclick: () => {
    session.branch = b.name; document.getElementById("branch").value = b.name; ctx.rerender();
  }}, "Work in it");
  return h("div", {},
    section("Branches", table(`${list.branches.length} branches`, [["name", choose], ["from", (b) => b.from], ["forked at", (b) => when(b.fork_at)],
      ["created by", (b) => short(b.created_by)], ["", work]], list.branches.map((b) => ({...b, id: b.name})), {id: "branches"}),
    ...createForm(ctx)),
    section(state.open ? `Diff: ${state.open}` : "Diff", ...[await diffView(ctx)].flat()));
}
