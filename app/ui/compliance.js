// Compliance: right-to-be-forgotten requests and retention runs (jobs, with what each removed or
// quarantined), the retention rules with what each will remove next, the audit log with filters
// and the service's own chain check, and a request to forget a user. Only what the key may see:
// the API answers 403/404 for the rest.
import {get, post, api} from "./api.js";
import {h, field, input, table, when, short, values, section, note} from "./dom.js";

const audit = {filters: {}, cursors: [""], check: ""};

function stats(s) {
  return Object.entries(s || {}).map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(", ") : typeof v === "object" ? JSON.stringify(v) : v}`).join(" · ");
}

async function jobsOf(kind, caption, id) {
  try {
    const p = await get("/v1/jobs", {kind, limit: 100});
    return table(caption, [["job", (j) => short(j.id)], ["status", (j) => j.status], ["progress", (j) => `${Math.round(100 * j.progress)}%`],
      ["subject", (j) => j.params.user_id || j.params.episode_id || ""], ["removed / quarantined", (j) => stats(j.stats)],
      ["error", (j) => j.error || ""], ["created", (j) => when(j.created_at)], ["finished", (j) => when(j.finished_at)]],
    p.items, {id});
  } catch (e) { return note(`${caption}: ${e.message}`); }
}

// The service's chain and seal check (POST /v1/audit/verify), window after window from the first
// event to the head, stopping at the first broken one; `checkpoint`: a line of `memscale audit
// checkpoint` the chain must still pass through.
export async function verifyChain(checkpoint, progress) {
  let since = 1, checked = 0;
  for (;;) {
    const r = await post("/v1/audit/verify", {since_seq: since, ...(checkpoint ? {checkpoint} : {})});
    checked += r.checked;
    if (!r.ok) return `broken at seq ${r.first_broken.seq}: ${r.first_broken.reason} (${checked} events checked)`;
    if (r.checked === 0 || r.to_seq >= r.head_seq) {
      const cp = checkpoint ? `; the checkpoint at seq ${checkpoint.seq} holds` : "";
      return `ok: ${checked} events checked, every hash, link and seal holds${cp}`;
    }
    since = r.to_seq + 1;
    progress(`checked up to seq ${r.to_seq} of ${r.head_seq}…`);
  }
}

function verifyForm() {
  const cp = input("checkpoint", {size: 40, placeholder: "optional: a line of memscale audit checkpoint"});
  const result = h("p", {id: "chain", role: "status"}, audit.check);
  const say = (t) => { audit.check = t; result.textContent = t; };
  const run = async () => {
    let checkpoint;
    try { checkpoint = cp.value.trim() ? JSON.parse(cp.value) : undefined; } catch (e) {
      say("the checkpoint is not a JSON line");
      return;
    }
    say("verifying…");
    try { say(await verifyChain(checkpoint, say)); } catch (e) { say("refused: " + e.message); }
  };
  return [h("div", {class: "filters"}, field("Checkpoint (JSON)", cp), h("button", {type: "button", onclick: run}, "Verify chain")),
    result];
}

async function retentionRules() {
  try {
    const r = await get("/v1/retention");
    if (!r.rules.length) return note("No retention rules: nothing is removed by age (memscale admin set-retention sets one).");
    return table(`Retention rules (as of ${when(r.at)})`, [["item type", (x) => x.item_type], ["days", (x) => String(x.days)],
      ["removes items from before", (x) => when(x.cutoff)], ["the next run removes", (x) => x.due === null ? "" : String(x.due)]],
    r.rules.map((x) => ({...x, id: x.item_type})), {id: "retention-rules"});
  } catch (e) { return note(e.status === 403 ? "Retention rules need the steward, auditor or admin role." : e.message); }
}

function forgetForm(ctx) {
  const form = h("form", {class: "filters", "aria-label": "forget a user"},
    field("User id", input("user", {size: 36, required: true})),
    field("I understand this erases the user's data", h("input", {type: "checkbox", name: "confirm", required: true})),
    h("button", {type: "submit"}, "Forget this user"));
  const out = h("p", {role: "status"});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("DELETE", `/v1/users/${encodeURIComponent(values(form).user)}/data`);
      out.textContent = "erasure job " + r.job_id;
      ctx.rerender();
    } catch (e) { out.textContent = "refused: " + e.message; }
  });
  return [form, out];
}

async function auditLog(ctx) {
  const f = audit.filters;
  const form = h("form", {class: "filters", "aria-label": "audit filters"},
    ["actor", "action", "target_type", "target_id"].map((k) => field(k.replace("_", " "), input(k, {value: f[k] || "", size: 12}))),
    field("Since", input("since", {type: "datetime-local", step: 1, value: f.since || ""})),
    field("Until", input("until", {type: "datetime-local", step: 1, value: f.until || ""})),
    h("button", {type: "submit"}, "Filter"),
    h("button", {type: "button", onclick: () => { audit.filters = {action: "memory.declassify"}; audit.cursors = [""]; ctx.rerender(); }},
      "Declassifications"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); audit.filters = values(form); audit.cursors = [""]; ctx.rerender(); });
  let page;
  try {
    const iso = (t) => t ? new Date(t).toISOString() : undefined;
    page = await get("/v1/audit", {...f, since: iso(f.since), until: iso(f.until), cursor: audit.cursors[audit.cursors.length - 1], limit: 100});
  } catch (e) {
    return [form, note(e.status === 403 ? "The audit log needs the auditor or admin role." : e.message)];
  }
  const next = h("button", {type: "button", disabled: !page.next_cursor,
    onclick: () => { audit.cursors.push(page.next_cursor); ctx.rerender(); }}, "Next page");
  const prev = h("button", {type: "button", disabled: audit.cursors.length < 2, onclick: () => { audit.cursors.pop(); ctx.rerender(); }},
    "Previous page");
  return [form, table(`Audit log (${page.events.length} events)`, [["seq", (e) => String(e.seq)], ["at", (e) => when(e.at)],
    ["actor", (e) => short(e.actor) || "system"], ["action", (e) => e.action], ["target", (e) => `${e.target_type || ""} ${short(e.target_id)}`],
    ["details", (e) => h("span", {class: "text"}, JSON.stringify(e.details))]], page.events.map((e) => ({...e, id: e.seq})), {id: "audit"}),
  h("div", {class: "pager"}, prev, next), ...verifyForm()];
}

export async function render(ctx) {
  return h("div", {},
    section("Right to be forgotten", await jobsOf("forget_user", "Erasure requests", "erasures"), ...forgetForm(ctx)),
    section("Retention", await retentionRules(), note("Each run below says what it removed."),
      await jobsOf("retention", "Retention runs", "retention")),
    section("Audit log", ...await auditLog(ctx)));
}
