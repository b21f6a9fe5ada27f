// The page's only way to the server: relative URLs (the UI may live under a path prefix),
// JSON in and out, errors sorted into three kinds the app reacts to differently.

/** The server answered with an error (4xx): `status`, `message`, maybe `field`. */
export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.field = field;
  }
}

/** The server could not be reached, or answered like a proxy with nothing behind it (5xx). */
export class NetworkError extends Error {
  constructor(message) {
    super(message);
    this.name = "NetworkError";
  }
}

/** A 503 from a standby (a server that does not lead): `leader` is the URL of the one that
 * does ("" while none is known); `message` is the server's own explanation, shown as text. */
export class NotLeader extends ApiError {
  constructor(message, leader) {
    super(503, message);
    this.name = "NotLeader";
    this.leader = leader;
  }
}

/** A 401 from a data route: the app has been told and shows the sign-in form. */
export class Unauthorized extends ApiError {
  constructor(message) {
    super(401, message);
    this.name = "Unauthorized";
  }
}

let unauthorizedHandler = () => {};
let notLeaderHandler = () => {};

export function onUnauthorized(fn) {
  unauthorizedHandler = fn;
}

/** `fn(leader)` is called when the server answers that it does not lead. */
export function onNotLeader(fn) {
  notLeaderHandler = fn;
}

export const qs = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  return q.toString();
};

function abortError() {
  return new DOMException("aborted", "AbortError");
}

async function request(method, path, body, { signal, authRoute = false } = {}) {
  const init = { method, credentials: "same-origin", cache: "no-store", signal, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new NetworkError("the server cannot be reached");
  }
  let data = null;
  try {
    data = await res.json();
  } catch (err) {
    if (err.name === "AbortError") throw err;
  }
  if (signal?.aborted) throw abortError();
  if (res.ok) return data;
  const message = (data && typeof data.error === "string" && data.error) || `HTTP ${res.status}`;
  if (res.status === 503 && data && typeof data.leader === "string") {
    notLeaderHandler(data.leader);
    throw new NotLeader(message, data.leader);
  }
  if (res.status >= 500) throw new NetworkError(`the server answered ${res.status}`);
  if (res.status === 401 && !authRoute) {
    unauthorizedHandler();
    throw new Unauthorized(message);
  }
  throw new ApiError(res.status, message, data?.field);
}

export const get = (path, signal) => request("GET", path, undefined, { signal });
export const post = (path, body, signal) => request("POST", path, body, { signal });

export const session = () => request("GET", "api/session", undefined, { authRoute: true });
export const login = (token) => request("POST", "login", { token }, { authRoute: true });
export const logout = () => request("POST", "logout", {}, { authRoute: true });
