// Task detail: what blocks it (first, when anything does), its fields, the last failure's
// explanation in full, the attempt history, and its dependencies and dependents as links.
import * as api from "./api.js";
import { confirmed } from "./dialog.js";
import {
  badge,
  fmtDuration,
  fmtPercent,
  graphHref,
  h,
  now,
  plural,
  replace,
  safeHref,
  table,
  taskLink,
  tasksHref,
  timeEl,
} from "./dom.js";
import { ATTEMPT_ENDS, STATUS } from "./names.js";


function trackingUrl(url) {
  const attrs = { "data-testid": "task-tracking-url", class: "mono url" };
  if (url && safeHref(url) && !url.startsWith("#")) {
    return h("a", { ...attrs, href: url, rel: "noopener noreferrer", target: "_blank" }, url);
  }
  return h("span", { ...attrs, class: "mono url placeholder" }, url ?? "");
}

function refList(refs) {
  return h(
    "ul",
    { class: "refs" },
    refs.map((r) => h("li", null, badge(r.status), " ", taskLink(r.task_id), " ", h("span", { class: "muted mono" }, r.family))),
  );
}

function blockedBy(task) {
  if (!task.blocked_by?.length) return null;
  return h(
    "section",
    { class: "alert", "aria-labelledby": "blocked-h" },
    h("h2", { id: "blocked-h" }, `Blocked by ${plural(task.blocked_by.length, "upstream task")}`),
    h("div", { "data-testid": "blocked-by" }, refList(task.blocked_by)),
    h("p", null, h("a", { href: graphHref(task.task_id) }, "Show the failure path in the graph →")),
  );
}

function actions(task, ctx) {
  const id = task.task_id;
  const buttons = [];
  if (task.status === STATUS.FAILED) {
    const run = () => api.post("api/retry", { task_ids: [id] });
    buttons.push(
      h(
        "button",
        { type: "button", "data-action": "retry", onclick: () => confirmed(`Retry ${id} now?`, run, ctx.refreshNow) },
        "Retry now",
      ),
    );
  }
  if (task.status === STATUS.DISABLED) {
    const run = () => api.post("api/reenable", { task_ids: [id] });
    const q = `Re-enable ${id}? Its failure count is reset and it becomes PENDING.`;
    buttons.push(
      h("button", { type: "button", "data-action": "reenable", onclick: () => confirmed(q, run, ctx.refreshNow) }, "Re-enable"),
    );
  }
  if (CANCELLABLE.has(task.status)) buttons.push(cancelButton(task, ctx));
  return h("div", { class: "actions" }, buttons);
}

// Cancel: the task (and, when ticked, every task that needs it) becomes DISABLED with the
// reason "cancelled"; a running attempt's worker is told to stop it. DONE tasks are kept.
const CANCELLABLE = new Set([STATUS.PENDING, STATUS.RUNNING, STATUS.FAILED, STATUS.UNKNOWN]);

function cancelButton(task, ctx) {
  const id = task.task_id;
  const ask = () => {
    const downstream = h("input", { type: "checkbox", "data-testid": "cancel-downstream" });
    const extra = h("label", { class: "confirm-extra" }, downstream, " also cancel every task that needs it");
    const stops = task.status === STATUS.RUNNING ? " Its worker is told to stop its running attempt." : "";
    const q = `Cancel ${id}? It becomes DISABLED with the reason "cancelled".${stops} Re-enable undoes it.`;
    const run = () => api.post("api/cancel", { task_id: id, downstream: downstream.checked });
    const report = (result) => {
      const n = result?.changed?.length ?? 0;
      const kept = result?.skipped?.length ?? 0;
      return `${plural(n, "task")} cancelled` + (kept ? `, ${kept} DONE kept` : "") + ".";
    };
    confirmed(q, run, ctx.refreshNow, { extra, ok: "Cancel task", dismiss: "Keep it", report });
  };
  return h("button", { type: "button", class: "danger", "data-action": "cancel", onclick: ask }, "Cancel");
}

function dl(pairs) {
  return h(
    "dl",
    { class: "fields" },
    pairs.filter(Boolean).map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))),
  );
}

function paramsTable(params) {
  const entries = Object.entries(params || {});
  if (!entries.length) return h("p", { class: "muted" }, "No parameters.");
  return table(
    ["Name", "Value"],
    entries.map(([k, v]) => h("tr", null, h("th", { scope: "row", class: "mono" }, k), h("td", { class: "mono pre-wrap" }, String(v)))),
    "kv",
  );
}

function resources(res) {
  const entries = Object.entries(res || {});
  if (!entries.length) return h("span", { class: "muted" }, "none");
  return h("span", { class: "mono" }, entries.map(([k, v]) => `${k}: ${v}`).join(", "));
}

function progress(p) {
  return h(
    "span",
    { class: "progress" },
    p != null ? h("progress", { max: "100", value: String(Math.max(0, Math.min(100, p))), "aria-hidden": "true" }) : null,
    h("span", { "data-testid": "task-progress", class: "placeholder" }, fmtPercent(p)),
  );
}

// `number` counts the attempts kept, oldest = 1; the scheduler's attempt id (a 53-bit fencing
// token) is the cell's tooltip and the row's data-attempt-id.
function attemptRow(a, number) {
  const end = a.ended ?? now();
  return h(
    "tr",
    {
      "data-testid": "attempt-row",
      "data-outcome": a.outcome ?? undefined,
      "data-worker": a.worker ?? "",
      "data-attempt-id": a.attempt != null ? String(a.attempt) : undefined,
    },
    h("td", { class: "num", "data-testid": "attempt-number", title: `attempt id ${a.attempt}` }, String(number)),
    h("td", { class: "nowrap" }, timeEl(a.started)),
    h("td", { class: "nowrap" }, a.ended != null ? timeEl(a.ended) : h("span", { class: "muted" }, "running")),
    h("td", { class: "nowrap num" }, fmtDuration(end - a.started)),
    h("td", null, h("span", { class: "outcome o-" + (a.outcome ?? "running") }, a.outcome ? ATTEMPT_ENDS[a.outcome] ?? a.outcome : "running")),
    h("td", { class: "mono" }, a.worker ?? ""),
  );
}

// The history is oldest first; once it holds `kept` attempts, older ones were let go, so "1" is
// the oldest kept, and the page says so.
function attempts(list, kept) {
  if (!list?.length) return h("p", { class: "muted" }, "No attempts yet.");
  return [
    table(["#", "Started", "Ended", "Duration", "Outcome", "Worker"], list.map((a, i) => attemptRow(a, i + 1)), "attempts"),
    kept && list.length >= kept ? h("p", { class: "muted" }, `Only the latest ${kept} attempts are kept: #1 is the oldest of them.`) : null,
  ];
}

// When a FAILED task is retried, or a DISABLED one enabled again (null: nothing pending).
function nextRetry(task) {
  if (task.next_retry == null) return null;
  const what = task.status === STATUS.DISABLED ? "enabled again at " : "next retry at ";
  return h("span", { "data-testid": "task-next-retry" }, what, timeEl(task.next_retry));
}

function section(title, ...content) {
  return h("section", { class: "panel" }, h("h2", null, title), content);
}

function render(task, ctx) {
  const failures = task.retry_count != null ? `${task.failures} of ${task.retry_count} allowed` : String(task.failures ?? 0);
  const more = (task.dependents_total ?? 0) - (task.dependents?.length ?? 0);
  return [
    h(
      "div",
      { class: "detail-head" },
      badge(task.status, { "data-testid": "task-state" }),
      actions(task, ctx),
      h(
        "span",
        { class: "head-links" },
        h("a", { href: graphHref(task.task_id) }, "Graph"),
        " · ",
        h("a", { href: graphHref(task.task_id, true) }, "Graph with downstream"),
      ),
    ),
    blockedBy(task),
    section(
      "Summary",
      dl([
        ["Family", h("a", { href: tasksHref({ family: task.family }), class: "mono" }, task.family)],
        ...(task.submitted_by ? [["Submitted by", h("span", { "data-testid": "task-submitted-by" }, task.submitted_by)]] : []),
        ["Module", h("span", { class: "mono" }, task.module ?? "")],
        ["Worker", task.worker ? h("a", { href: tasksHref({ worker: task.worker }), class: "mono" }, task.worker) : h("span", { class: "muted" }, "none")],
        ["Priority", String(task.priority ?? 0)],
        ["Resources", resources(task.resources)],
        ["Failures", failures],
        ...(task.next_retry != null ? [["Retry", nextRetry(task)]] : []),
        ...(task.labels?.length ? [["Labels", h("span", { class: "mono", "data-testid": "task-labels" }, task.labels.join(", "))]] : []),
        ...(task.waiting ? [["Waiting", h("span", { "data-testid": "task-waiting" }, task.waiting)]] : []),
        ["Status message", h("span", { "data-testid": "task-status-message", class: "placeholder pre-wrap" }, task.status_message ?? "")],
        ["Progress", progress(task.progress)],
        ["Tracking URL", trackingUrl(task.tracking_url)],
      ]),
    ),
    section("Parameters", paramsTable(task.params)),
    section("Last failure", h("pre", { "data-testid": "task-error", class: "explanation placeholder" }, task.explanation ?? "")),
    section("Attempts", attempts(task.attempts, task.attempts_kept)),
    ...(task.batch?.length
      ? [
          section(
            `Batch (${task.batch.length} tasks, one attempt)`,
            h("ul", { class: "refs", "data-testid": "task-batch" }, task.batch.map((id) => h("li", null, taskLink(id)))),
          ),
        ]
      : []),
    section(`Dependencies (${task.deps?.length ?? 0})`, task.deps?.length ? refList(task.deps) : h("p", { class: "muted" }, "None.")),
    section(
      `Dependents (${task.dependents_total ?? task.dependents?.length ?? 0})`,
      task.dependents?.length ? refList(task.dependents) : h("p", { class: "muted" }, "None."),
      more > 0 ? h("p", { class: "muted" }, `…and ${more} more, not listed.`) : null,
    ),
  ];
}

export function create(ctx) {
  const id = ctx.route.arg;
  const title = h("h1", { "data-testid": "view-title", class: "mono task-title" }, id);
  const body = h("div", { class: "detail" });
  const el = h("section", { class: "view" }, h("p", { class: "kicker" }, "Task"), title, body);
  ctx.setTitle(id);
  let lastKey = "";

  async function refresh(signal) {
    let data;
    try {
      data = await api.get("api/task?" + api.qs({ id }), signal);
    } catch (err) {
      if (err.name !== "ApiError" || err.status !== 404) throw err;
      lastKey = "";
      replace(body, h("p", { class: "empty" }, "There is no task with this id."));
      return undefined;
    }
    const task = data.task;
    // Running attempts show a live duration, so redraw those even when nothing else changed.
    const running = task.attempts?.some((a) => a.ended == null);
    const key = JSON.stringify(task);
    if (key !== lastKey || running) {
      lastKey = key;
      replace(body, render(task, ctx));
    }
    return data.seq;
  }

  return { el, refresh };
}
