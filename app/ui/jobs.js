// Jobs of the org (members: their own) with state, progress and errors; the org's embedder and its
// re-embedding's progress; start a job of a kind the key's roles may start (GET /v1/jobs/kinds), its
// parameters a form built from the kind's params schema in the API's OpenAPI document, so a new
// kind appears here without a change. POST /v1/jobs stays the authority: a refusal shows as text.
import {get, post, api} from "./api.js";
import {h, field, input, select, table, when, short, values, section, note} from "./dom.js";

const state = {cursors: [""], kind: ""};

async function openapi() {
  const r = await fetch("/openapi.json");
  return r.json();
}

// kind → its params' JSON schema, from JobIn's per-kind `if kind = … then params: …` clauses.
function paramSchemas(doc) {
  const out = {};
  ((doc.components.schemas.JobIn || {}).allOf || []).forEach((c) => {
    const kind = c.if?.properties?.kind?.const;
    if (kind) out[kind] = c.then?.properties?.params || {};
  });
  return out;
}

function typeOf(p) { return p.type || (p.anyOf || []).map((x) => x.type).find((t) => t && t !== "null") || "string"; }

// One labelled control per parameter (named "p.<name>"): enums a choice, numbers a number field,
// lists comma-separated; an empty field is left out, so the server's default applies.
function paramFields(schema) {
  const props = schema.properties || {}, required = new Set(schema.required || []);
  return Object.entries(props).map(([name, p]) => {
    const label = (p.title || name) + (p.default !== undefined && p.default !== null ? ` (default ${p.default})` : "");
    const t = typeOf(p), nm = "p." + name;
    if (p.enum) return field(label, select(nm, ["", ...p.enum], ""));
    if (t === "boolean") return field(label, select(nm, ["", "true", "false"], ""));
    const attrs = {size: t === "array" ? 30 : 16, required: required.has(name), "data-key": name};
    if (t === "integer" || t === "number") Object.assign(attrs, {type: "number", step: t === "integer" ? 1 : "any"});
    return field(label + (t === "array" ? " (comma-separated)" : ""), input(nm, attrs));
  });
}

function paramValues(schema, v) {
  const out = {};
  Object.entries(schema.properties || {}).forEach(([name, p]) => {
    const raw = v["p." + name];
    if (raw === undefined) return;
    const t = typeOf(p);
    if (t === "integer" || t === "number") out[name] = Number(raw);
    else if (t === "boolean") out[name] = raw === "true";
    else if (t === "array") out[name] = raw.split(",").map((x) => x.trim()).filter(Boolean);
    else out[name] = raw;
  });
  return out;
}

function startForm(kinds, schemas, ctx) {
  const kindSelect = select("kind", kinds, kinds[0]);
  const params = h("div", {class: "filters", id: "job-params"});
  const fill = () => params.replaceChildren(...paramFields(schemas[kindSelect.value] || {}));
  kindSelect.addEventListener("change", fill);
  fill();
  const form = h("form", {class: "filters", "aria-label": "start a job"}, field("Kind", kindSelect), params,
    h("button", {type: "submit"}, "Start"));
  const out = h("p", {role: "status", id: "job-started"});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = values(form);
    try {
      const r = await post("/v1/jobs", {kind: v.kind, params: paramValues(schemas[v.kind] || {}, v)});
      out.textContent = "started " + r.id;
      ctx.rerender();
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

// The org's embedding model (any key holder may read it) and, while one runs, the re-embedding's progress.
async function embedder() {
  let e;
  try { e = await get("/v1/orgs/current/embedder"); } catch (err) { return note("embedder: " + err.message); }
  const row = (label, key, v) => [h("dt", {}, label), h("dd", {"data-key": key}, String(v))];
  const r = e.reembedding;
  const rows = [row("model", "model", e.model), row("dimensions", "dimensions", e.dimensions)];
  if (r) rows.push(row("re-embedding to", "target", r.model), row("re-embedded", "done", `${r.done} of ${r.total}`),
    row("started", "started", when(r.started_at)));
  return h("div", {id: "embedder"}, h("dl", {class: "fields"}, rows.flat()),
    r ? h("progress", {max: Math.max(r.total, 1), value: r.done, "aria-label": "re-embedding progress"}) : null);
}

export async function render(ctx) {
  const doc = await openapi();
  const kinds = ((doc.components.schemas.JobIn || {}).properties || {}).kind?.enum || [];
  const [may, page, emb] = await Promise.all([
    get("/v1/jobs/kinds").then((r) => new Set(r.kinds.filter((k) => k.may_start).map((k) => k.name))),
    get("/v1/jobs", {kind: state.kind, cursor: state.cursors[state.cursors.length - 1], limit: 50}),
    embedder()]);
  const startable = kinds.filter((k) => may.has(k));
  const filter = select("filter", ["", ...kinds, "forget_user", "delete_episode"], state.kind);
  filter.addEventListener("change", () => { state.kind = filter.value; state.cursors = [""]; ctx.rerender(); });
  const cancel = (j) => ["queued", "running"].includes(j.status) ? h("button", {type: "button", onclick: async () => {
    try { await api("POST", `/v1/jobs/${j.id}/cancel`); ctx.rerender(); } catch (e) { ctx.status(e.message); }
  }}, "Cancel") : "";
  return h("div", {},
    section("Embedder", emb),
    section("Start a job", ...(startable.length ? startForm(startable, paramSchemas(doc), ctx) :
      [note("Your roles may not start jobs.")])),
    section("Jobs", field("Kind", filter),
      table(`${page.items.length} jobs`, [["job", (j) => short(j.id)], ["kind", (j) => j.kind], ["status", (j) => j.status],
        ["progress", (j) => h("progress", {max: 1, value: j.progress, "aria-label": "progress"})], ["stats", (j) => JSON.stringify(j.stats)],
        ["error", (j) => h("span", {class: "text"}, j.error || "")], ["created", (j) => when(j.created_at)], ["", cancel]],
      page.items, {id: "jobs"}),
      h("div", {class: "pager"},
        h("button", {type: "button", disabled: state.cursors.length < 2, onclick: () => { state.cursors.pop(); ctx.rerender(); }}, "Previous page"),
        h("button", {type: "button", disabled: !page.next_cursor, onclick: () => { state.cursors.push(page.next_cursor); ctx.rerender(); }},
          "Next page"))));
}
