// The page: hash router, session handling and the live-update loop.
//
// Each view module exports create(ctx) → {el, refresh(signal) → seq?, update?(route), destroy?()}.
// `refresh` fetches the view's data and redraws it in place; the seq it returns (or the
// latest seq known when it started) is what the view was drawn with. A poll of api/changes
// each second compares the server's seq with it and refreshes the view when they differ.
// The same answer says whether the server leads: a standby's page is read-only (body class
// "read-only" hides every [data-action] button) and its banner names the leader.
import * as api from "./api.js";
import { initDialog } from "./dialog.js";
import { h, safeHref } from "./dom.js";
import * as graph from "./graph.js";
import * as overview from "./overview.js";
import { signinView } from "./signin.js";
import * as task from "./task.js";
import * as tasks from "./tasks.js";
import * as workers from "./workers.js";

const POLL_MS = 1000;
const VIEWS = { overview, tasks, task, graph, workers };
const NAV = { overview: "overview", tasks: "tasks", task: "tasks", graph: "tasks", workers: "workers" };

const main = document.getElementById("main");
const banner = document.getElementById("banner");
const standbyBanner = document.getElementById("standby");
const signoutButton = document.getElementById("signout");

let current = null; // {name, view}
let inflight = null; // the refresh under way: {ctrl}
let again = false; // a refresh was asked for while one was under way
let drawnSeq; // seq the current view was drawn with
let latestSeq; // seq last answered by api/changes
let pollTimer = 0;
let polling = false;
let offline = false;
let signinShown = false;
let authRequired = false;
let shownRole = "leader"; // the server's role and leader the page shows: "leader" | "standby"
let shownLeader = "";

function decode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** "#/graph/<id>?down=1" → {name: "graph", arg: id, query: URLSearchParams}. */
export function parseRoute(hash) {
  const path = hash.replace(/^#/, "") || "/";
  const query = new URLSearchParams();
  const m = /^\/(task|graph)\/(.+)$/.exec(path);
  if (m) {
    let rest = m[2];
    // A task id never contains a raw "?" in links we build (it is encoded); a graph route may
    // carry ?down=1. Task routes take everything as the id, so raw ids in hand-typed links work.
    const q = rest.lastIndexOf("?");
    if (m[1] === "graph" && q >= 0 && /^(down=[01]?)?$/.test(rest.slice(q + 1))) {
      for (const [k, v] of new URLSearchParams(rest.slice(q + 1))) query.set(k, v);
      rest = rest.slice(0, q);
    }
    return { name: m[1], arg: decode(rest), query };
  }
  const [p, q = ""] = path.split(/\?(.*)/s);
  const qp = new URLSearchParams(q);
  if (p === "/" || p === "") return { name: "overview", query: qp };
  if (p === "/tasks") return { name: "tasks", query: qp };
  if (p === "/workers") return { name: "workers", query: qp };
  return { name: "notfound", query: qp, arg: path };
}

function setTitle(t) {
  document.title = `${t} · conveyor`;
}

function navigate(hash, replaceEntry = false) {
  if (replaceEntry) {
    history.replaceState(null, "", hash);
    show();
  } else if (location.hash === hash) {
    show();
  } else {
    location.hash = hash;
  }
}

function notFoundView(route) {
  setTitle("Not found");
  return {
    el: h(
      "section",
      { class: "view" },
      h("h1", { "data-testid": "view-title" }, "Not found"),
      h("p", null, "Nothing lives at ", h("code", null, "#" + route.arg), ". ", h("a", { href: "#/" }, "Go to the overview.")),
    ),
    refresh: async () => undefined,
  };
}

function setNav(name) {
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === NAV[name]) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

function destroyCurrent() {
  inflight?.ctrl.abort();
  inflight = null;
  current?.view.destroy?.();
  current = null;
}

function show() {
  if (signinShown) return;
  const route = parseRoute(location.hash);
  setNav(route.name);
  if (current && current.name === route.name && current.view.update?.(route)) {
    refresh(true);
    return;
  }
  destroyCurrent();
  const ctx = { route, setTitle, navigate, refreshNow: () => refresh(true) };
  const view = route.name in VIEWS ? VIEWS[route.name].create(ctx) : notFoundView(route);
  current = { name: route.name, view };
  drawnSeq = undefined;
  main.replaceChildren(view.el);
  window.scrollTo(0, 0);
  refresh(true);
}

function errorBox(err) {
  return h("p", { class: "form-error view-error", role: "alert" }, `Could not load this view: ${err.message}`);
}

/** Fetch the current view's data and redraw it. `force` aborts a refresh under way. */
async function refresh(force = false) {
  if (!current) return;
  if (inflight) {
    if (!force) {
      again = true;
      return;
    }
    inflight.ctrl.abort();
  }
  const me = { ctrl: new AbortController() };
  inflight = me;
  again = false;
  const startSeq = latestSeq;
  const { view } = current;
  try {
    const seq = await view.refresh(me.ctrl.signal);
    if (inflight !== me) return;
    drawnSeq = seq ?? startSeq;
    view.el.querySelector(".view-error")?.remove();
  } catch (err) {
    if (inflight !== me || err.name === "AbortError" || err.name === "Unauthorized") return;
    if (err.name === "NetworkError") setOffline(true);
    else {
      drawnSeq = startSeq;
      view.el.querySelector(".view-error")?.remove();
      view.el.append(errorBox(err));
    }
  } finally {
    if (inflight === me) {
      inflight = null;
      if (again) refresh();
    }
  }
}

function setOffline(value) {
  if (offline === value) return;
  offline = value;
  banner.hidden = !value;
}

/** The leader's URL as a link when it is http(s), else as text: never markup. */
function leaderRef(url) {
  const href = safeHref(url);
  if (href === null || href.startsWith("#")) return h("code", { "data-testid": "leader-url" }, url);
  return h("a", { href, rel: "noopener noreferrer", "data-testid": "leader-url" }, url);
}

/** Show the server's role: a standby's page is read-only and names the leader. */
function setRole(role, leader) {
  const url = typeof leader === "string" ? leader : "";
  const standby = role === "standby";
  document.body.classList.toggle("read-only", standby);
  if ((standby ? "standby" : "leader") === shownRole && url === shownLeader) return;
  shownRole = standby ? "standby" : "leader";
  shownLeader = url;
  if (!standby) {
    standbyBanner.hidden = true;
    standbyBanner.replaceChildren();
    return;
  }
  standbyBanner.replaceChildren(
    "This scheduler is a standby: read-only. ",
    ...(url ? ["The leader is ", leaderRef(url), "."] : ["There is no leader yet."]),
  );
  standbyBanner.hidden = false;
}

function noteRole(data) {
  if (data && typeof data.role === "string") setRole(data.role, data.leader);
}

/** Ask for the role once now (the poll keeps it up to date after). */
async function learnRole() {
  try {
    noteRole(await api.get("api/changes"));
  } catch {
    /* the poll tries again */
  }
}

async function poll() {
  if (!polling) return;
  try {
    const data = await api.get("api/changes?" + api.qs({ since: latestSeq ?? 0 }));
    if (!polling) return;
    latestSeq = data.seq;
    noteRole(data);
    if (offline) {
      setOffline(false);
      refresh(true);
    } else if (data.seq !== drawnSeq) {
      refresh();
    }
  } catch (err) {
    if (err.name === "Unauthorized") return; // polling stops; the sign-in form is up
    setOffline(true);
  }
  if (polling) pollTimer = setTimeout(poll, POLL_MS);
}

function startPolling() {
  if (polling) return;
  polling = true;
  pollTimer = setTimeout(poll, POLL_MS);
}

function stopPolling() {
  polling = false;
  clearTimeout(pollTimer);
}

function requireSignin() {
  if (signinShown) return;
  signinShown = true;
  authRequired = true;
  stopPolling();
  destroyCurrent();
  setOffline(false);
  signoutButton.hidden = true;
  document.body.classList.add("signed-out");
  setTitle("Sign in");
  const view = signinView(() => {
    signinShown = false;
    signedIn();
  });
  main.replaceChildren(view.el);
  view.focus();
}

function signedIn() {
  document.body.classList.remove("signed-out");
  signoutButton.hidden = !authRequired;
  learnRole();
  show();
  startPolling();
}

async function signOut() {
  try {
    await api.logout();
  } catch {
    /* the session ends on the server anyway when it can be reached */
  }
  requireSignin();
}

async function start() {
  let session;
  try {
    session = await api.session();
  } catch (err) {
    setOffline(true);
    setTimeout(start, POLL_MS);
    return;
  }
  setOffline(false);
  authRequired = Boolean(session.auth_required);
  if (authRequired && !session.signed_in) requireSignin();
  else signedIn();
}

initDialog();
api.onUnauthorized(requireSignin);
api.onNotLeader((leader) => setRole("standby", leader));
signoutButton.addEventListener("click", signOut);
window.addEventListener("hashchange", show);
start();
