// The console's shell: sign-in (the key stays in this tab's sessionStorage), the as-of and branch
// pickers that every page reads, and a hash router (#/browse, #/item/<type>/<id>, #/search,
// #/compliance, #/branches, #/jobs). Each page module exports render(ctx) → a node.
import {session} from "./api.js";
import {h} from "./dom.js";
import * as browse from "./browse.js";
import * as item from "./item.js";
import * as playground from "./playground.js";
import * as compliance from "./compliance.js";
import * as branches from "./branches.js";
import * as jobs from "./jobs.js";

const $ = (id) => document.getElementById(id);
const PAGES = {browse, item, search: playground, compliance, branches, jobs};
let renders = 0;  // counts route() calls: only the newest may fill the view

export function status(text) { $("status").textContent = text; }

// The picker holds local time; the API takes an ISO instant (UTC).
function asOfIso() {
  const v = session.asOf;
  return v ? new Date(v).toISOString() : "";
}

async function route() {
  const view = $("view");
  const signedIn = !!session.key;
  $("signin").hidden = signedIn;
  $("signout").hidden = !signedIn;
  if (!signedIn) {
    view.replaceChildren(h("p", {class: "note"}, "Sign in with your API key. It is kept only in this browser tab."));
    return;
  }
  const [name, ...args] = (location.hash.replace(/^#\/?/, "") || "browse").split("/").map(decodeURIComponent);
  const page = PAGES[name] || browse;
  document.querySelectorAll("nav a").forEach((a) => {
    a.setAttribute("aria-current", a.getAttribute("href") === "#/" + (name === "item" ? "browse" : name) ? "page" : "false");
  });
  const ctx = {asOf: asOfIso(), branch: session.branch, args, status, rerender: route};
  const turn = ++renders;  // a render overtaken by a newer one (a click, then a link) is dropped
  view.setAttribute("aria-busy", "true");
  status("loading…");
  const t0 = performance.now();
  let content;
  try {
    content = await page.render(ctx);
    if (turn !== renders) return;
    status(`${session.branch ? "branch " + session.branch : "main"}${ctx.asOf ? " as of " + ctx.asOf : ""} · ${Math.round(performance.now() - t0)} ms`);
  } catch (e) {
    if (turn !== renders) return;
    content = h("p", {class: "error", role: "alert"}, "error: " + e.message);
    status("error");
  }
  view.replaceChildren(content);
  view.setAttribute("aria-busy", "false");
  view.setAttribute("data-page", name);
}

$("signin").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  session.key = $("key").value.trim();
  $("key").value = "";
  await route();
});
$("signout").addEventListener("submit", (ev) => {
  ev.preventDefault();
  session.key = ""; session.branch = ""; session.asOf = "";
  $("asof").value = ""; $("branch").value = "";
  route();
});
$("timeform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  session.asOf = $("asof").value; session.branch = $("branch").value.trim();
  route();
});
$("now").addEventListener("click", () => {
  session.asOf = ""; session.branch = ""; $("asof").value = ""; $("branch").value = "";
  route();
});
window.addEventListener("hashchange", route);
$("asof").value = session.asOf;
$("branch").value = session.branch;
route();
