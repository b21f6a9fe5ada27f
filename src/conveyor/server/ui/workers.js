// Workers and resources: who is connected, when each was last heard from, what it runs;
// each resource's capacity, use and holders. On a standby (`live: false`) none of that is
// known here: the view says the live list is on the leader and lists the workers the store
// knows of, marked as such.
import * as api from "./api.js";
import { fmtAgo, fmtTime, h, replace, safeHref, table, taskLink } from "./dom.js";

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

function storedRow(w) {
  return h(
    "tr",
    { "data-testid": "stored-worker-row", "data-worker-id": w.worker_id },
    h("td", { class: "mono" }, w.worker_id),
    h("td", null, w.assistant ? "yes" : "no"),
  );
}

function leaderRef(url) {
  if (!url) return "the leader (none is known yet)";
  const href = safeHref(url);
  if (href === null || href.startsWith("#")) return h("code", null, url);
  return h("a", { href, rel: "noopener noreferrer" }, url);
}

/** A standby's answer: where the live list is, and the workers the store knows of. */
function notLive(data) {
  const workers = data.workers ?? [];
  return [
    h(
      "section",
      { class: "panel", "data-testid": "workers-not-live" },
      h("h2", null, "The live worker list is on the leader"),
      h(
        "p",
        null,
        "This scheduler is a standby: it does not hear from workers. Who is connected, their last contact, ",
        "what they run and the use of each resource are shown by ",
        leaderRef(data.leader),
        ".",
      ),
    ),
    h(
      "section",
      { class: "panel" },
      h("h2", null, `Workers the store knows of (${workers.length})`),
      workers.length
        ? table(["Worker", "Assistant"], workers.map(storedRow), "workers")
        : h("p", { class: "empty" }, "The store knows of no worker."),
    ),
  ];
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
    if (data.live === false) {
      replace(body, notLive(data));
      return undefined;
    }
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
