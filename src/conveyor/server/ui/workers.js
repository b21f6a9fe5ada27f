// Workers and resources: who is connected, when each was last heard from, what it runs;
// each resource's capacity, use and holders.
import * as api from "./api.js";
import { fmtAgo, fmtTime, h, replace, table, taskLink } from "./dom.js";

const AGE_REFRESH_MS = 5000;

function taskLinks(ids) {
  if (!ids?.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "inline-list" }, ids.map((id) => h("li", null, taskLink(id))));
}

function workerRow(w) {
  return h(
    "tr",
    { "data-testid": "worker-row", "data-worker-id": w.worker_id },
    h("td", { class: "mono" }, w.worker_id),
    h("td", { class: "mono" }, w.host ?? ""),
    h("td", { class: "nowrap" }, h("time", null, fmtTime(w.last_seen)), h("span", { class: "muted" }, ` (${fmtAgo(w.last_seen)})`)),
    h("td", null, w.assistant ? "yes" : "no"),
    h("td", null, taskLinks(w.running)),
  );
}

function resourceRow(r) {
  const cap = r.capacity ?? 0;
  const used = r.used ?? 0;
  return h(
    "tr",
    { "data-testid": "resource-row", "data-resource": r.name },
    h("td", { class: "mono" }, r.name),
    h("td", { class: "num" }, String(cap)),
    h(
      "td",
      { class: "nowrap" },
      h("meter", { min: "0", max: String(Math.max(cap, 1)), value: String(used), "aria-hidden": "true" }),
      ` ${used} of ${cap}`,
    ),
    h("td", null, taskLinks(r.holders)),
  );
}

export function create(ctx) {
  const body = h("div");
  const el = h("section", { class: "view" }, h("h1", { "data-testid": "view-title" }, "Workers and resources"), body);
  ctx.setTitle("Workers");
  let lastKey = "";
  let lastDraw = 0;
  // Last-contact ages move without any change on the server: redraw them now and then.
  const timer = setInterval(() => ctx.refreshNow(), AGE_REFRESH_MS);

  async function refresh(signal) {
    const data = await api.get("api/workers", signal);
    const key = JSON.stringify(data);
    if (key === lastKey && Date.now() - lastDraw < AGE_REFRESH_MS - 500) return undefined;
    lastKey = key;
    lastDraw = Date.now();
    const { workers = [], resources = [] } = data;
    replace(
      body,
      h(
        "section",
        { class: "panel" },
        h("h2", null, `Workers (${workers.length})`),
        workers.length
          ? table(["Worker", "Host", "Last contact", "Assistant", "Running"], workers.map(workerRow), "workers")
          : h("p", { class: "empty" }, "No worker has contacted the scheduler."),
      ),
      h(
        "section",
        { class: "panel" },
        h("h2", null, `Resources (${resources.length})`),
        resources.length
          ? table(["Resource", "Capacity", "In use", "Held by"], resources.map(resourceRow), "resources")
          : h("p", { class: "empty" }, "No resources are configured."),
      ),
    );
    return undefined;
  }

  return { el, refresh, destroy: () => clearInterval(timer) };
}
