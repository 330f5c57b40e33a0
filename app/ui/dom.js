// Building blocks of every page. Values only ever become text nodes or attribute values set with
// setAttribute on a fixed list of names: nothing from the API is parsed as markup, so stored
// content such as `<img src=x onerror=...>` shows as the characters it is.
const ATTRS = new Set(["id", "class", "type", "name", "value", "placeholder", "for", "href", "role", "title", "size",
  "min", "max", "step", "colspan", "scope", "aria-label", "aria-live", "aria-current", "aria-busy", "data-id",
  "data-type", "data-key", "data-visibility", "data-count", "data-page", "data-signal", "rows", "cols", "checked",
  "selected", "disabled", "required", "autocomplete", "tabindex", "list", "open"]);

export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => {
    if (v === undefined || v === null || v === false) return;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") { e.addEventListener(k.slice(2), v); return; }
    if (!ATTRS.has(k)) throw new Error("attribute not allowed: " + k);
    if (k === "href" && !String(v).startsWith("#")) throw new Error("only in-page links");
    e.setAttribute(k, v === true ? "" : String(v));
  });
  children.flat().forEach((c) => {
    if (c === undefined || c === null || c === false) return;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  });
  return e;
}

// A labelled control: every input the console draws has a <label for>.
let seq = 0;
export function field(label, control) {
  const id = control.id || ("f" + (++seq));
  control.id = id;
  return h("div", {class: "field"}, h("label", {for: id}, label), control);
}

export function input(name, attrs) { return h("input", {name, autocomplete: "off", ...(attrs || {})}); }

export function select(name, options, value) {
  return h("select", {name}, options.map((o) => {
    const [v, text] = Array.isArray(o) ? o : [o, o === "" ? "(any)" : o];
    return h("option", {value: v, selected: v === value}, text);
  }));
}

// A table of `rows` with `cols` = [[header, (row) => cell]]; a cell is text or a node.
export function table(caption, cols, rows, attrs) {
  return h("table", attrs || {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, cols.map(([name]) => h("th", {scope: "col"}, name)))),
    h("tbody", {}, rows.map((r) => h("tr", {"data-id": r.id === undefined ? null : String(r.id)},
      cols.map(([, f]) => h("td", {}, f(r)))))));
}

export function when(t) { return t ? String(t).replace("T", " ").slice(0, 19) : ""; }
export function short(id) { return id ? String(id).slice(0, 8) : ""; }
export function itemLink(type, id, text) {
  return h("a", {href: `#/item/${encodeURIComponent(type)}/${encodeURIComponent(id)}`}, text || short(id));
}

// The form's values as an object (empty fields left out).
export function values(form) {
  const out = {};
  new FormData(form).forEach((v, k) => { if (v !== "") out[k] = v; });
  return out;
}

export function section(title, ...children) { return h("section", {"aria-label": title}, h("h2", {}, title), ...children); }
export function note(text, cls) { return h("p", {class: cls || "note"}, text); }
