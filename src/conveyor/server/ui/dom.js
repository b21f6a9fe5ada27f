// DOM helpers. Every string that reaches the page goes through a text node or a plain
// attribute: this module never parses HTML, so values from the server cannot become markup.

import { STATES } from "./names.js";

export { STATES };

const FORBIDDEN_ATTRS = new Set(["style", "srcdoc", "formaction", "action"]);

/** The scheme-checked form of a URL for an href: our own "#/..." links, or http(s) URLs. */
export function safeHref(url) {
  if (typeof url !== "string" || url === "") return null;
  if (url.startsWith("#")) return url;
  try {
    const { protocol } = new URL(url);
    return protocol === "http:" || protocol === "https:" ? url : null;
  } catch {
    return null;
  }
}

function setAttr(el, name, value) {
  if (name === "class") el.className = value;
  else if (name === "href") {
    const href = safeHref(String(value));
    if (href !== null) el.setAttribute("href", href);
  } else if (name.startsWith("on")) {
    if (typeof value !== "function") throw new TypeError(`handler ${name} must be a function`);
    el.addEventListener(name.slice(2), value);
  } else if (FORBIDDEN_ATTRS.has(name)) {
    throw new TypeError(`attribute ${name} is not allowed`);
  } else if (name === "value" || name === "checked" || name === "disabled" || name === "hidden") {
    el[name] = value;
  } else {
    el.setAttribute(name, value === true ? "" : String(value));
  }
}

/** Append children: nodes as they are, everything else as text. Arrays are flattened. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** h("a", {href: "#/", class: "x"}, "text", otherNode) — strings only ever become text nodes. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      setAttr(el, name, value);
    }
  }
  return append(el, children);
}

/** Replace an element's children in one step, keeping the window's scroll position. */
export function replace(el, ...children) {
  const { scrollX, scrollY } = window;
  const frag = append(document.createDocumentFragment(), children);
  el.replaceChildren(frag);
  if (window.scrollY !== scrollY || window.scrollX !== scrollX) window.scrollTo(scrollX, scrollY);
}

export const taskHref = (id) => "#/task/" + encodeURIComponent(id);
export const graphHref = (id, down) => "#/graph/" + encodeURIComponent(id) + (down ? "?down=1" : "");

export function tasksHref(filters) {
  const qs = new URLSearchParams();
  for (const key of ["state", "family", "worker", "q", "cursor"]) {
    if (filters[key]) qs.set(key, filters[key]);
  }
  const s = qs.toString();
  return "#/tasks" + (s ? "?" + s : "");
}

export const taskLink = (id) => h("a", { href: taskHref(id), class: "mono task-link" }, id);

export const stateClass = (status) => "s-" + (STATES.includes(status) ? status : "other");

export const badge = (status, attrs = {}) =>
  h("span", { ...attrs, class: "badge " + stateClass(status) }, status);

const pad = (n, w = 2) => String(n).padStart(w, "0");

/** Unix seconds → "2024-05-01 13:45:12" in local time. */
export function fmtTime(t) {
  if (typeof t !== "number" || !Number.isFinite(t)) return "";
  const d = new Date(t * 1000);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** Seconds → "450 ms", "2.3 s", "4m 05s", "1h 02m". */
export function fmtDuration(sec) {
  if (typeof sec !== "number" || !Number.isFinite(sec)) return "";
  if (sec < 0) sec = 0;
  if (sec < 1) return `${Math.round(sec * 1000)} ms`;
  if (sec < 60) return `${sec.toFixed(1)} s`;
  const s = Math.floor(sec);
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86400)}d ${pad(Math.floor(s / 3600) % 24)}h`;
}

export const now = () => Date.now() / 1000;

export function fmtAgo(t) {
  if (typeof t !== "number") return "";
  const d = now() - t;
  return d < 1 ? "just now" : `${fmtDuration(d).replace(/\.\d /, " ")} ago`;
}

/** 42 → "42%", 42.25 → "42.3%", null → "". */
export function fmtPercent(p) {
  if (typeof p !== "number" || !Number.isFinite(p)) return "";
  return `${Number.isInteger(p) ? p : Number(p.toFixed(1))}%`;
}

export function fmtParams(params) {
  if (!params || typeof params !== "object") return "";
  return Object.entries(params)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

/**
 * What a task's message cell shows: for a FAILED, DISABLED or UNKNOWN task with an explanation,
 * why it failed in one line (the server's `reason`, `data-testid="task-reason"`); otherwise its
 * status message, and its progress when it has one.
 */
export function messageCell(t) {
  if (t.reason) {
    return h("td", { class: "msg" }, h("span", { class: "reason", "data-testid": "task-reason" }, t.reason));
  }
  const pct = t.progress != null ? h("span", { class: "pct" }, ` ${fmtPercent(t.progress)}`) : null;
  return h("td", { class: "msg" }, t.status_message, pct);
}

/** A <time> element showing local time, with the relative age as its tooltip. */
export const timeEl = (t) => (t == null ? "" : h("time", { title: fmtAgo(t) }, fmtTime(t)));

export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** A table with a header row; rows are <tr> elements. */
export function table(headers, rows, cls = "") {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: cls },
      h("thead", null, h("tr", null, headers.map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", null, rows),
    ),
  );
}
