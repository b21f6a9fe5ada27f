// Graph view: the dependency graph around a task on a canvas, coloured by state, with the
// path to whatever blocks it drawn in thick red; the blocking tasks are also listed as links.
import * as api from "./api.js";
import { STATES, graphHref, h, plural, replace, stateClass, taskHref, taskLink } from "./dom.js";
import { GraphCanvas } from "./graphcanvas.js";

function legend(nodes) {
  const counts = {};
  for (const nd of nodes) counts[nd.status] = (counts[nd.status] ?? 0) + 1;
  return h(
    "ul",
    { class: "legend", "aria-label": "Legend" },
    STATES.map((s) => h("li", null, h("span", { class: "swatch " + stateClass(s) }), `${s} ${counts[s] ?? 0}`)),
    h("li", null, h("span", { class: "swatch path" }), "failure path"),
    h("li", null, h("span", { class: "swatch blocking" }), "blocking"),
    h("li", null, h("span", { class: "swatch root" }), "this task"),
  );
}

function blockingList(g) {
  const ids = (g.blocking || []).filter((i) => g.nodes[i]);
  if (!ids.length) return null;
  return h(
    "section",
    { class: "panel" },
    h("h2", null, `Blocked by ${plural(ids.length, "upstream task")}`),
    h(
      "ul",
      { class: "refs" },
      ids.slice(0, 200).map((i) => h("li", null, h("span", { class: "badge " + stateClass(g.nodes[i].status) }, g.nodes[i].status), " ", taskLink(g.nodes[i].id))),
    ),
    ids.length > 200 ? h("p", { class: "muted" }, `…and ${ids.length - 200} more.`) : null,
  );
}

export function create(ctx) {
  const id = ctx.route.arg;
  const down = ctx.route.query.get("down") === "1";
  ctx.setTitle(`Graph of ${id}`);
  const checkbox = h("input", { type: "checkbox", checked: down, onchange: (ev) => ctx.navigate(graphHref(id, ev.target.checked)) });
  const tip = h("div", { class: "graph-tip", hidden: true, role: "tooltip" });
  const box = h("div", { class: "graph-box", "data-testid": "graph" }, tip);
  const status = h("div", { class: "graph-status" });
  const extra = h("div");
  const legendBox = h("div");
  let gc = null;
  let lastKey = "";

  const button = (label, title, fn) => h("button", { type: "button", class: "secondary small", title, "aria-label": title, onclick: fn }, label);
  const el = h(
    "section",
    { class: "view graph-view" },
    h("p", { class: "kicker" }, "Graph"),
    h("h1", { "data-testid": "view-title", class: "mono task-title" }, id),
    h(
      "div",
      { class: "graph-toolbar" },
      h("a", { href: taskHref(id) }, "← Task detail"),
      h("label", { class: "check" }, checkbox, " Show downstream"),
      h(
        "span",
        { class: "zoom-buttons" },
        button("+", "Zoom in", () => gc?.zoom(1.25)),
        button("−", "Zoom out", () => gc?.zoom(0.8)),
        button("Fit", "Fit the whole graph", () => {
          gc?.fit();
          gc?.schedule();
        }),
      ),
      h("span", { class: "muted hint" }, "Drag to pan, wheel to zoom, click a node to open it."),
    ),
    status,
    legendBox,
    box,
    extra,
  );

  function onHover(node, x, y) {
    if (!node) {
      tip.hidden = true;
      return;
    }
    tip.textContent = `${node.id}\n${node.family} · ${node.status}`;
    tip.hidden = false;
    const left = Math.min(x + 14, box.clientWidth - tip.offsetWidth - 4);
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${y + 16}px`;
  }

  async function refresh(signal) {
    let g;
    try {
      g = await api.get("api/graph?" + api.qs({ id, down: down ? 1 : 0 }), signal);
    } catch (err) {
      if (err.name !== "ApiError" || err.status !== 404) throw err;
      lastKey = "";
      replace(status, h("p", { class: "empty" }, "There is no task with this id."));
      box.hidden = true;
      return undefined;
    }
    const key = JSON.stringify(g);
    if (key === lastKey) return undefined;
    lastKey = key;
    box.hidden = false;
    replace(
      status,
      g.truncated
        ? h("p", { class: "warning", "data-testid": "graph-truncated" }, `Showing the nearest ${g.cap ?? g.nodes.length} of more tasks: the graph was truncated.`)
        : null,
    );
    replace(legendBox, legend(g.nodes));
    const first = !gc;
    if (first) gc = new GraphCanvas(box, { onOpen: (node) => ctx.navigate(taskHref(node.id)), onHover });
    gc.canvas.setAttribute("aria-label", `Dependency graph of ${id}: ${plural(g.nodes.length, "task")}. The blocking tasks are listed below it.`);
    gc.setData(g, first);
    box.dataset.nodeCount = String(g.nodes.length);
    replace(extra, blockingList(g));
    return undefined;
  }

  return { el, refresh, destroy: () => gc?.destroy() };
}
