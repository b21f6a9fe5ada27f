// The graph renderer: one <canvas>, no per-node DOM. Each frame draws only what intersects
// the viewport, with one path per colour (edges, failure-path edges, nodes of each state),
// so 10,000 nodes cost a handful of fill/stroke calls. Pan by dragging, zoom with the wheel
// (or the +/−/0 keys), click a node to open it; hit tests look in a grid bucket, not in a scan.
import { CELL, NODE_H, NODE_W, cellKey, layout } from "./graphlayout.js";
import { STATUS } from "./names.js";

const MAX_SCALE = 2.5;
const LABEL_MIN_PX = 15; // node height on screen from which family labels are drawn
const DRAG_PX = 4;
const TWO_LINES_PX = 34; // from this node height on, the task id is drawn under the family

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

function palette() {
  return {
    PENDING: cssVar("--st-pending", "#6b8299"),
    RUNNING: cssVar("--st-running", "#1f6feb"),
    DONE: cssVar("--st-done", "#1a7f37"),
    FAILED: cssVar("--st-failed", "#cf222e"),
    DISABLED: cssVar("--st-disabled", "#6e5494"),
    UNKNOWN: cssVar("--st-unknown", "#bf8700"),
    other: "#888",
    edge: "rgba(70, 80, 100, 0.35)",
    path: cssVar("--st-failed", "#cf222e"),
    pathOutline: "#7a0b12",
    root: "#111",
    bg: cssVar("--graph-bg", "#fbfcfd"),
  };
}

const DARK_TEXT = new Set([STATUS.UNKNOWN]);

export class GraphCanvas {
  constructor(container, { onOpen, onHover }) {
    this.container = container;
    this.onOpen = onOpen;
    this.onHover = onHover;
    this.canvas = document.createElement("canvas");
    this.canvas.className = "graph-canvas";
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute("role", "img");
    container.append(this.canvas);
    this.ctx = this.canvas.getContext("2d", { alpha: false });
    this.colors = palette();
    this.L = null;
    this.s = 1;
    this.ox = 0;
    this.oy = 0;
    this.hover = -1;
    this.frame = 0;
    this.resize();
    this.observer = new ResizeObserver(() => {
      this.resize();
      this.draw();
    });
    this.observer.observe(container);
    this.bindInput();
  }

  destroy() {
    this.observer.disconnect();
    cancelAnimationFrame(this.frame);
  }

  resize() {
    this.dpr = window.devicePixelRatio || 1;
    this.w = Math.max(1, this.container.clientWidth);
    this.h = Math.max(1, this.container.clientHeight);
    this.canvas.width = Math.round(this.w * this.dpr);
    this.canvas.height = Math.round(this.h * this.dpr);
  }

  /** New data: lay it out; keep the camera unless `fit` (first data, or a different graph). */
  setData(graph, fit) {
    this.L = layout(graph);
    this.hover = -1;
    if (fit) this.fit();
    this.draw();
  }

  fit() {
    const { x0, y0, x1, y1 } = this.L.bounds;
    const margin = 30;
    const s = Math.min((this.w - 2 * margin) / (x1 - x0), (this.h - 2 * margin) / (y1 - y0), 1);
    this.s = Math.max(s, 1e-4);
    this.minScale = this.s / 4;
    this.ox = this.w / 2 - ((x0 + x1) / 2) * this.s;
    this.oy = this.h / 2 - ((y0 + y1) / 2) * this.s;
  }

  zoomAt(sx, sy, factor) {
    const s = Math.min(MAX_SCALE, Math.max(this.minScale ?? 1e-4, this.s * factor));
    this.ox = sx - ((sx - this.ox) * s) / this.s;
    this.oy = sy - ((sy - this.oy) * s) / this.s;
    this.s = s;
    this.schedule();
  }

  zoom(factor) {
    this.zoomAt(this.w / 2, this.h / 2, factor);
  }

  pan(dx, dy) {
    this.ox += dx;
    this.oy += dy;
    this.schedule();
  }

  schedule() {
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.draw();
      });
    }
  }

  /** The node under screen point (sx, sy), or -1. */
  hit(sx, sy) {
    const L = this.L;
    if (!L) return -1;
    const wx = (sx - this.ox) / this.s;
    const wy = (sy - this.oy) / this.s;
    const tol = Math.min(3 / this.s, CELL);
    let best = -1;
    for (let cx = Math.floor((wx - tol) / CELL); cx <= Math.floor((wx + tol) / CELL); cx++) {
      for (let cy = Math.floor((wy - tol) / CELL); cy <= Math.floor((wy + tol) / CELL); cy++) {
        for (const i of L.cells.get(cellKey(cx, cy)) ?? []) {
          if (wx >= L.x[i] - tol && wx <= L.x[i] + NODE_W + tol && wy >= L.y[i] - tol && wy <= L.y[i] + NODE_H + tol) {
            if (best < 0 || i < best) best = i; // nearest to the root first
          }
        }
      }
    }
    return best;
  }

  bindInput() {
    const c = this.canvas;
    let down = null;
    const point = (ev) => {
      const r = c.getBoundingClientRect();
      return [ev.clientX - r.left, ev.clientY - r.top];
    };
    c.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      const [x, y] = point(ev);
      down = { x, y, lastX: x, lastY: y, moved: false };
      c.setPointerCapture(ev.pointerId);
    });
    c.addEventListener("pointermove", (ev) => {
      const [x, y] = point(ev);
      if (down) {
        if (!down.moved && Math.hypot(x - down.x, y - down.y) > DRAG_PX) {
          down.moved = true;
          c.classList.add("dragging");
        }
        if (down.moved) this.pan(x - down.lastX, y - down.lastY);
        down.lastX = x;
        down.lastY = y;
        return;
      }
      this.setHover(this.hit(x, y), x, y);
    });
    const end = (ev, click) => {
      if (!down) return;
      const wasClick = click && !down.moved;
      down = null;
      c.classList.remove("dragging");
      if (wasClick) {
        const [x, y] = point(ev);
        const i = this.hit(x, y);
        if (i >= 0) this.onOpen(this.L.nodes[i]);
      }
    };
    c.addEventListener("pointerup", (ev) => end(ev, true));
    c.addEventListener("pointercancel", (ev) => end(ev, false));
    c.addEventListener("pointerleave", () => {
      if (!down) this.setHover(-1, 0, 0);
    });
    c.addEventListener(
      "wheel",
      (ev) => {
        ev.preventDefault();
        const [x, y] = point(ev);
        const unit = ev.deltaMode === 1 ? 20 : ev.deltaMode === 2 ? 400 : 1;
        this.zoomAt(x, y, Math.exp(-ev.deltaY * unit * 0.0015));
      },
      { passive: false },
    );
    c.addEventListener("keydown", (ev) => {
      const step = 60;
      const keys = {
        ArrowLeft: () => this.pan(step, 0),
        ArrowRight: () => this.pan(-step, 0),
        ArrowUp: () => this.pan(0, step),
        ArrowDown: () => this.pan(0, -step),
        "+": () => this.zoom(1.25),
        "=": () => this.zoom(1.25),
        "-": () => this.zoom(0.8),
        0: () => {
          this.fit();
          this.schedule();
        },
        Enter: () => this.hover >= 0 && this.onOpen(this.L.nodes[this.hover]),
      };
      const fn = keys[ev.key];
      if (fn) {
        ev.preventDefault();
        fn();
      }
    });
  }

  setHover(i, x, y) {
    if (i !== this.hover) {
      this.hover = i;
      this.canvas.classList.toggle("over-node", i >= 0);
      this.schedule();
    }
    this.onHover(i >= 0 ? this.L.nodes[i] : null, x, y);
  }

  /** Screen-space viewport in world coordinates, padded by `pad` world units. */
  view(pad) {
    return {
      x0: -this.ox / this.s - pad,
      y0: -this.oy / this.s - pad,
      x1: (this.w - this.ox) / this.s + pad,
      y1: (this.h - this.oy) / this.s + pad,
    };
  }

  draw() {
    const { ctx, dpr, s, L, colors } = this;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, this.w, this.h);
    if (!L || !L.n) return;
    ctx.setTransform(dpr * s, 0, 0, dpr * s, dpr * this.ox, dpr * this.oy);
    const v = this.view(8 / s);
    this.drawEdges(v, 0, colors.edge, Math.max(1 / s, 0));
    this.drawEdges(v, 1, colors.path, 3 / s);
    this.drawNodes(v);
    this.drawOutlines(v);
    if (NODE_H * s >= LABEL_MIN_PX) this.drawLabels(v);
  }

  drawEdges(v, onPath, color, width) {
    const { seg, edgeOnPath } = this.L;
    const ctx = this.ctx;
    ctx.beginPath();
    let any = false;
    for (let e = 0, m = edgeOnPath.length; e < m; e++) {
      if (edgeOnPath[e] !== onPath) continue;
      const ax = seg[4 * e];
      const ay = seg[4 * e + 1];
      const bx = seg[4 * e + 2];
      const by = seg[4 * e + 3];
      if ((ax < v.x0 && bx < v.x0) || (ax > v.x1 && bx > v.x1) || (ay < v.y0 && by < v.y0) || (ay > v.y1 && by > v.y1)) continue;
      ctx.moveTo(ax, ay);
      ctx.lineTo(bx, by);
      any = true;
    }
    if (!any) return;
    ctx.lineWidth = width;
    ctx.strokeStyle = color;
    ctx.stroke();
  }

  visible(i, v) {
    const { x, y } = this.L;
    return x[i] + NODE_W >= v.x0 && x[i] <= v.x1 && y[i] + NODE_H >= v.y0 && y[i] <= v.y1;
  }

  drawNodes(v) {
    const { ctx, L, colors, s } = this;
    // Keep far zoomed-out nodes visible as at least ~1.5 screen pixels.
    const w = Math.max(NODE_W, 1.5 / s);
    const hgt = Math.max(NODE_H, 1.5 / s);
    for (const [status, ids] of L.byStatus) {
      ctx.beginPath();
      for (const i of ids) if (this.visible(i, v)) ctx.rect(L.x[i], L.y[i], w, hgt);
      ctx.fillStyle = colors[status] ?? colors.other;
      ctx.fill();
    }
  }

  ring(ids, v, inflate, width, color) {
    const { ctx, L } = this;
    ctx.beginPath();
    for (const i of ids) {
      if (this.visible(i, v)) ctx.rect(L.x[i] - inflate, L.y[i] - inflate, NODE_W + 2 * inflate, NODE_H + 2 * inflate);
    }
    ctx.lineWidth = width;
    ctx.strokeStyle = color;
    ctx.stroke();
  }

  drawOutlines(v) {
    const { L, s, colors } = this;
    this.ring(L.pathNodes, v, 1.5 / s, 2 / s, colors.pathOutline);
    // Blocking nodes get a ring that stays visible even when nodes are sub-pixel.
    this.ring(L.blocking, v, Math.max(3 / s, 5 / s), 3 / s, colors.path);
    if (L.root >= 0) this.ring([L.root], v, 4 / s, 2.5 / s, colors.root);
    if (this.hover >= 0) this.ring([this.hover], v, 2 / s, 2 / s, "#0b57d0");
  }

  drawLabels(v) {
    const { ctx, L, s, dpr } = this;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.textBaseline = "middle";
    const boxH = NODE_H * s;
    const twoLines = boxH >= TWO_LINES_PX;
    const px = twoLines ? Math.min(15, Math.floor(boxH * 0.34)) : Math.max(10, Math.min(15, Math.floor(boxH * 0.5)));
    const idPx = Math.max(9, px - 2);
    const font = `${px}px system-ui, -apple-system, "Segoe UI", sans-serif`;
    const idFont = `${idPx}px ui-monospace, Menlo, Consolas, monospace`;
    const fit = (text, size, mono) => {
      const max = Math.max(1, Math.floor((NODE_W * s - 10) / (size * (mono ? 0.62 : 0.56))));
      let t = String(text ?? "");
      if (t.length > max && !mono) t = t.slice(t.lastIndexOf(".") + 1);
      return t.length > max ? t.slice(0, Math.max(1, max - 1)) + "…" : t;
    };
    for (const [status, ids] of L.byStatus) {
      ctx.fillStyle = DARK_TEXT.has(status) ? "#1b1b1b" : "#ffffff";
      const shown = ids.filter((i) => this.visible(i, v));
      ctx.font = font;
      for (const i of shown) {
        ctx.fillText(fit(L.nodes[i].family, px, false), L.x[i] * s + this.ox + 5, L.y[i] * s + this.oy + (twoLines ? boxH * 0.32 : boxH / 2));
      }
      if (!twoLines) continue;
      ctx.font = idFont;
      for (const i of shown) ctx.fillText(fit(L.nodes[i].id, idPx, true), L.x[i] * s + this.ox + 5, L.y[i] * s + this.oy + boxH * 0.7);
    }
  }

}
