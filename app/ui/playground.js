// Search and context playground: POST /v1/search and /v1/context as the signed-in user, with an
// instruction, a budget and the as-of picker's instant. Each result shows why it ranked: every
// signal's share of its score (`explain.signals`, when the server gives explanations).
import {post} from "./api.js";
import {h, field, input, select, table, itemLink, values, section, note} from "./dom.js";

const last = {form: {query: "", instruction: "", mode: "hybrid", k: "10", budget: "2000", explain: "on"}, search: null, context: null, info: ""};

// The closing entry of an explanation takes the signals' raw sum to the score (the logistic squash of
// hybrid fusion, or the rounding); it is shown apart, not as a signal.
const CLOSING = new Set(["logistic", "rounding"]);

// The signals' shares of their raw sum, largest first; the closing entry last, with no share.
export function shares(result) {
  const s = (result.explain && result.explain.signals) || {};
  const signals = Object.entries(s).filter(([name]) => !CLOSING.has(name));
  const raw = signals.reduce((a, [, c]) => a + c, 0);
  const rows = signals.map(([name, c]) => ({name, contribution: c, share: raw > 0 ? c / raw : null}))
    .sort((a, b) => Math.abs(b.contribution) - Math.abs(a.contribution));
  const closing = Object.entries(s).filter(([name]) => CLOSING.has(name)).map(([name, c]) => ({name, contribution: c, share: null}));
  return rows.concat(closing);
}

function why(result) {
  const rows = shares(result);
  if (!rows.length) return h("span", {class: "muted"}, "—");
  return h("table", {class: "explain", "aria-label": "signal shares"}, h("tbody", {}, rows.map((r) =>
    h("tr", {"data-signal": r.name}, h("th", {scope: "row"}, CLOSING.has(r.name) ? `${r.name} (to the score)` : r.name),
      h("td", {}, r.share === null ? "" : `${(100 * r.share).toFixed(1)}%`), h("td", {}, r.contribution.toFixed(4)),
      h("td", {}, r.share === null ? "" : h("meter", {min: 0, max: 1, value: Math.max(0, r.share), "aria-label": r.name}))))));
}

async function search(body, explain) {
  return [await post("/v1/search", explain ? {...body, explain: true} : body), ""];
}

async function run(form, ctx) {
  const v = values(form);
  last.form = {...v, explain: v.explain || ""};
  const common = {query: v.query, ...(v.instruction ? {instruction: v.instruction} : {}), ...(ctx.asOf ? {as_of: ctx.asOf} : {})};
  [last.search, last.info] = await search({...common, mode: v.mode, k: Number(v.k)}, !!v.explain);
  last.context = await post("/v1/context", {...common, budget_tokens: Number(v.budget)});
  ctx.rerender();
}

function resultsView() {
  const r = last.search;
  if (!r) return note("Run a query to see what the agent would get, and why.");
  const interp = r.interpreted ? h("p", {id: "interpreted"}, "Instruction read as: ", JSON.stringify(r.interpreted.filters || {}),
    r.interpreted.ignored && r.interpreted.ignored.length ? ` · ignored: ${r.interpreted.ignored.join("; ")}` : "") : null;
  return [interp, last.info ? note(last.info) : null,
    table(`${r.results.length} results (retrieval ${r.retrieval_id})`, [["#", (x) => String(r.results.indexOf(x) + 1)],
      ["item", (x) => itemLink(x.type, x.id, x.type)], ["text", (x) => h("span", {class: "text"}, x.text)],
      ["score", (x) => x.score.toFixed(4)], ["why it ranked", why]], r.results, {id: "results"})];
}

function contextView() {
  const c = last.context;
  if (!c) return null;
  return section(`Context: ${c.tokens} of ${c.budget_tokens} tokens`,
    table("Sections", [["section", (s) => s.name], ["tokens", (s) => String(s.tokens)], ["items", (s) => String(s.items.length)]],
      c.sections.map((s) => ({...s, id: s.name})), {id: "sections"}),
    h("pre", {id: "context-text", class: "text"}, c.text));
}

export async function render(ctx) {
  const f = last.form;
  const form = h("form", {class: "filters", "aria-label": "run a search"},
    field("Query", input("query", {value: f.query, size: 40, required: true})),
    field("Instruction", input("instruction", {value: f.instruction || "", size: 30})),
    field("Mode", select("mode", ["hybrid", "vector", "text"], f.mode)),
    field("Results (k)", input("k", {type: "number", min: 1, max: 100, value: f.k})),
    field("Context budget (tokens)", input("budget", {type: "number", min: 64, max: 128000, value: f.budget})),
    field("Explain scores", h("input", {type: "checkbox", name: "explain", checked: f.explain === "on"})),
    h("button", {type: "submit"}, "Run"));
  const err = h("p", {class: "error", role: "alert"});
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(form, ctx).catch((e) => { err.textContent = e.message; }); });
  return h("div", {}, section("Search and context playground", form, err, ...[resultsView()].flat()), contextView());
}
