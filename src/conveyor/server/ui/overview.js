// Overview: the count of tasks in each state (each a link to the filtered list), the total,
// and short lists of what is running and what failed most recently.
import * as api from "./api.js";
import { STATES, badge, h, messageCell, replace, stateClass, table, taskLink, tasksHref, timeEl } from "./dom.js";
import { STATUS } from "./names.js";

function countCard(state, n) {
  return h(
    "div",
    { class: "count-card " + stateClass(state) },
    h("a", { href: tasksHref({ state }), "data-testid": `count-${state}`, class: "count" }, String(n)),
    h("span", { class: "count-label" }, state),
  );
}

// `testid` names the section; a failed task's row shows why it failed (`task-reason`), any
// other its status message and progress.
function shortList(title, testid, message, rows, state, total) {
  if (!rows || rows.length === 0) return null;
  const trs = rows.map((t) =>
    h(
      "tr",
      { "data-task-id": t.task_id },
      h("td", null, taskLink(t.task_id)),
      h("td", null, badge(t.status)),
      messageCell(t),
      h("td", { class: "nowrap" }, timeEl(t.changed)),
    ),
  );
  return h(
    "section",
    { class: "panel", "data-testid": testid },
    h("h2", null, title),
    table(["Task", "State", message, "Changed"], trs),
    total > rows.length ? h("p", null, h("a", { href: tasksHref({ state }) }, `All ${total} ${state} tasks →`)) : null,
  );
}

async function optional(promise) {
  try {
    return await promise;
  } catch (err) {
    if (err.name === "AbortError" || err.name === "Unauthorized") throw err;
    return null;
  }
}

export function create(ctx) {
  const body = h("div", { class: "overview" });
  const el = h("section", { class: "view" }, h("h1", { "data-testid": "view-title" }, "Overview"), body);
  ctx.setTitle("Overview");
  let lastKey = "";

  async function refresh(signal) {
    const [summary, failed, running] = await Promise.all([
      api.get("api/summary", signal),
      optional(api.get("api/tasks?" + api.qs({ state: STATUS.FAILED, limit: 10 }), signal)),
      optional(api.get("api/tasks?" + api.qs({ state: STATUS.RUNNING, limit: 10 }), signal)),
    ]);
    const key = JSON.stringify([summary.counts, summary.total, failed?.tasks, running?.tasks]);
    if (key === lastKey) return summary.seq;
    lastKey = key;
    const counts = summary.counts || {};
    replace(
      body,
      h("div", { class: "counts" }, STATES.map((s) => countCard(s, counts[s] ?? 0))),
      h(
        "p",
        { class: "total" },
        "Total: ",
        h("a", { href: "#/tasks", "data-testid": "count-total" }, String(summary.total ?? 0)),
        " tasks",
      ),
      shortList("Running now", "running-now", "Status message", running?.tasks, STATUS.RUNNING, counts.RUNNING ?? 0),
      shortList("Failed most recently", "failed-recently", "Reason", failed?.tasks, STATUS.FAILED, counts.FAILED ?? 0),
    );
    return summary.seq;
  }

  return { el, refresh };
}
