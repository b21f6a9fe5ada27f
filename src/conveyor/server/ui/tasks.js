// Task list: filters (state, family, worker, text) kept in the hash query, evaluated by the
// server; keyset pagination ("Next page" passes the server's opaque cursor); newest change first.
import * as api from "./api.js";
import { confirmed } from "./dialog.js";
import { STATES, badge, fmtParams, h, messageCell, plural, replace, table, taskLink, tasksHref, timeEl } from "./dom.js";
import { STATUS } from "./names.js";

const PAGE = 50;
const FILTERS = ["state", "family", "worker", "q"];

const filtersOf = (route) => Object.fromEntries(FILTERS.map((k) => [k, route.query.get(k) || ""]));

function row(t) {
  const params = fmtParams(t.params);
  return h(
    "tr",
    { "data-testid": "task-row", "data-task-id": t.task_id },
    h("td", { class: "id-cell" }, taskLink(t.task_id)),
    h("td", { class: "mono" }, t.family),
    h("td", { class: "mono params", title: params }, params),
    h("td", null, badge(t.status)),
    h("td", { class: "mono" }, t.worker ?? ""),
    h("td", { class: "num" }, String(t.priority ?? 0)),
    messageCell(t),
    h("td", { class: "nowrap" }, timeEl(t.changed)),
  );
}

function select(label, name, options) {
  return h(
    "label",
    null,
    h("span", { class: "label" }, label),
    h("select", { name, "aria-label": label }, options.map(([v, text]) => h("option", { value: v }, text))),
  );
}

function textInput(label, name, placeholder, list) {
  return h(
    "label",
    null,
    h("span", { class: "label" }, label),
    h("input", { type: "search", name, "aria-label": label, placeholder, list, autocomplete: "off", spellcheck: "false" }),
  );
}

export function create(ctx) {
  let route = ctx.route;
  let lastKey = "";
  let typingTimer = 0;
  const workerList = h("datalist", { id: "worker-options" });
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter tasks" },
    select("State", "state", [["", "All states"], ...STATES.map((s) => [s, s])]),
    select("Family", "family", [["", "All families"]]),
    textInput("Worker", "worker", "worker id", "worker-options"),
    textInput("Search", "q", "text in id or parameters"),
    h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", class: "secondary", onclick: () => ctx.navigate(tasksHref({})) }, "Clear"),
    workerList,
  );
  const retryAll = h(
    "button",
    { type: "button", class: "danger", "data-action": "retry-failed", onclick: onRetryAll },
    "Retry all failed",
  );
  const info = h("span", { class: "muted", role: "status" });
  const results = h("div", { class: "results" });
  const first = h("button", { type: "button", class: "secondary", onclick: () => go({ ...filters(), cursor: "" }) }, "First page");
  const next = h("button", { type: "button", "data-testid": "next-page" }, "Next page");
  const el = h(
    "section",
    { class: "view" },
    h("h1", { "data-testid": "view-title" }, "Tasks"),
    form,
    h("div", { class: "toolbar" }, info, retryAll),
    results,
    h("nav", { class: "pager", "aria-label": "Pages" }, first, next),
  );
  const field = (name) => form.elements.namedItem(name);
  const filters = () => filtersOf(route);
  const cursor = () => route.query.get("cursor") || "";

  function go(f, replaceEntry = false) {
    ctx.navigate(tasksHref(f), replaceEntry);
  }

  function formFilters() {
    return Object.fromEntries(FILTERS.map((k) => [k, field(k).value.trim()]));
  }

  function ensureOption(sel, value) {
    if (value && ![...sel.options].some((o) => o.value === value)) sel.append(h("option", { value }, value));
  }

  function syncForm() {
    const f = filters();
    ensureOption(field("family"), f.family);
    for (const k of FILTERS) if (document.activeElement !== field(k)) field(k).value = f[k];
    const onlyFailed = !f.state || f.state === STATUS.FAILED;
    retryAll.disabled = !onlyFailed;
    retryAll.title = onlyFailed ? "Retry every FAILED task matching the filters" : "The state filter excludes FAILED tasks";
    ctx.setTitle(f.state ? `${f.state} tasks` : "Tasks");
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    clearTimeout(typingTimer);
    go(formFilters());
  });
  for (const k of ["state", "family"]) field(k).addEventListener("change", () => go(formFilters()));
  for (const k of ["worker", "q"]) {
    field(k).addEventListener("input", () => {
      clearTimeout(typingTimer);
      typingTimer = setTimeout(() => go(formFilters(), true), 400);
    });
  }
  next.addEventListener("click", () => {
    if (next.dataset.cursor) {
      go({ ...filters(), cursor: next.dataset.cursor });
      window.scrollTo(0, 0);
    }
  });

  async function loadChoices() {
    try {
      const { families } = await api.get("api/families");
      const sel = field("family");
      const current = filters().family;
      sel.replaceChildren(h("option", { value: "" }, "All families"), families.map((f) => h("option", { value: f }, f)));
      ensureOption(sel, current);
      if (document.activeElement !== sel) sel.value = current;
    } catch {
      /* the filter still works by typing in the URL */
    }
    try {
      const { workers } = await api.get("api/workers");
      workerList.replaceChildren(workers.map((w) => h("option", { value: w.worker_id })));
    } catch {
      /* no suggestions */
    }
  }

  async function onRetryAll() {
    const { family, worker, q } = filters();
    let question = "Retry every FAILED task matching the current filters?";
    try {
      const d = await api.get("api/tasks?" + api.qs({ state: STATUS.FAILED, family, worker, q, limit: 500 }));
      const n = d.tasks.length;
      question = `Retry ${d.next ? `${n}+ failed tasks` : plural(n, "failed task")} matching the current filters now?`;
    } catch (err) {
      if (err.name === "Unauthorized") return;
    }
    await confirmed(question, () => api.post("api/retry-failed", { family, worker, q }), ctx.refreshNow);
  }

  async function refresh(signal) {
    const data = await api.get("api/tasks?" + api.qs({ ...filters(), cursor: cursor(), limit: PAGE }), signal);
    const key = JSON.stringify([data.tasks, data.next]);
    if (key !== lastKey) {
      lastKey = key;
      const rows = data.tasks.map(row);
      replace(
        results,
        rows.length
          ? table(["Task", "Family", "Parameters", "State", "Worker", "Priority", "Status or reason", "Changed"], rows, "tasks")
          : h("p", { class: "empty" }, "No tasks match these filters."),
      );
      const page = cursor() ? "Later page" : "Newest changes first";
      info.textContent = `${page}: ${plural(data.tasks.length, "task")}${data.next ? " (more on the next page)" : ""}`;
      next.dataset.cursor = data.next ?? "";
      next.hidden = next.disabled = !data.next;
      first.hidden = !cursor();
    }
    return data.seq;
  }

  function update(newRoute) {
    route = newRoute;
    lastKey = "";
    syncForm();
    return true;
  }

  syncForm();
  loadChoices();
  return { el, refresh, update, destroy: () => clearTimeout(typingTimer) };
}
