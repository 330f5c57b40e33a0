// The console's only way to the data: the public REST API, with the signed-in key kept in this
// tab's sessionStorage (gone when the tab closes, never sent anywhere but this origin).
const KEY = "memscale.key", BRANCH = "memscale.branch", ASOF = "memscale.as_of";

export const session = {
  get key() { return sessionStorage.getItem(KEY) || ""; },
  set key(v) { v ? sessionStorage.setItem(KEY, v) : sessionStorage.removeItem(KEY); },
  get branch() { return sessionStorage.getItem(BRANCH) || ""; },
  set branch(v) { v ? sessionStorage.setItem(BRANCH, v) : sessionStorage.removeItem(BRANCH); },
  get asOf() { return sessionStorage.getItem(ASOF) || ""; },
  set asOf(v) { v ? sessionStorage.setItem(ASOF, v) : sessionStorage.removeItem(ASOF); },
};

export class ApiError extends Error {
  constructor(status, code, message) { super(`${status} ${code}: ${message}`); this.status = status; this.code = code; }
}

// `params`: query parameters (arrays repeat the name; empty values are left out).
export function query(params) {
  const q = new URLSearchParams();
  Object.entries(params || {}).forEach(([k, v]) => {
    (Array.isArray(v) ? v : [v]).forEach((x) => { if (x !== undefined && x !== null && x !== "") q.append(k, String(x)); });
  });
  const s = q.toString();
  return s ? "?" + s : "";
}

// One API call as the signed-in user, in the chosen branch. `asOf`: pass the picker's instant
// (query parameter or body field, as the endpoint takes it) — done by the caller, who knows which.
export async function api(method, path, {params, body} = {}) {
  const headers = {"Authorization": "Bearer " + session.key};
  if (session.branch) headers["Memscale-Branch"] = session.branch;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path + query(params), {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  if (r.status === 204) return null;
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = data.error || {};
    throw new ApiError(r.status, e.code || "error", e.message || r.statusText);
  }
  return data;
}

export const get = (path, params) => api("GET", path, {params});
export const post = (path, body, params) => api("POST", path, {body, params});
