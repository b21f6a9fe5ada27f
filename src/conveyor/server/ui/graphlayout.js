// Graph layout, pure and O(V + E) apart from one sort per column.
//
// Columns are the server's layers: layer 0 (the root) in the middle, upstream layers
// (1, 2, …) further and further left, downstream layers (-1, -2, …) to the right. Within a
// column, nodes are ordered by one barycenter pass from the root outwards: each node sits near
// the mean height of its neighbours in the column next to it, towards the root. A column with
// very many nodes wraps into several sub-columns (row by row, so the order still runs top to
// bottom) to keep it roughly square instead of a hundred thousand pixels tall.

export const NODE_W = 150;
export const NODE_H = 24;
export const COL_PITCH = 176;
export const ROW_PITCH = 34;
export const LAYER_GAP = 150;
export const CELL = 256;
const MIN_ROWS = 40;

/** For each edge, which end is the child (further from the root): -1 when neither is. */
function parentOf(la, lb) {
  const aa = Math.abs(la);
  const ab = Math.abs(lb);
  if (aa === ab + 1 && (lb === 0 || Math.sign(la) === Math.sign(lb))) return 1; // a child, b parent
  if (ab === aa + 1 && (la === 0 || Math.sign(la) === Math.sign(lb))) return 0; // b child, a parent
  return -1;
}

/** Compressed adjacency: for each node, its neighbours one layer closer to the root. */
function parents(n, layer, edges) {
  const count = new Int32Array(n + 1);
  const kind = new Int8Array(edges.length);
  for (let e = 0; e < edges.length; e++) {
    const [a, b] = edges[e];
    const k = parentOf(layer[a], layer[b]);
    kind[e] = k;
    if (k === 1) count[a + 1]++;
    else if (k === 0) count[b + 1]++;
  }
  for (let i = 0; i < n; i++) count[i + 1] += count[i];
  const fill = count.slice(0, n);
  const list = new Int32Array(count[n]);
  for (let e = 0; e < edges.length; e++) {
    const [a, b] = edges[e];
    if (kind[e] === 1) list[fill[a]++] = b;
    else if (kind[e] === 0) list[fill[b]++] = a;
  }
  return { start: count, list };
}

function columns(n, layer) {
  const byLayer = new Map();
  for (let i = 0; i < n; i++) {
    let ids = byLayer.get(layer[i]);
    if (!ids) byLayer.set(layer[i], (ids = []));
    ids.push(i);
  }
  const order = [...byLayer.keys()].sort((p, q) => Math.abs(p) - Math.abs(q) || q - p);
  return order.map((L) => [L, byLayer.get(L)]);
}

function placeColumn(ids, bandLeft, x, y) {
  const m = ids.length;
  const rowsTarget = Math.max(MIN_ROWS, Math.ceil(Math.sqrt((m * COL_PITCH) / ROW_PITCH)));
  const k = Math.ceil(m / rowsTarget);
  const rows = Math.ceil(m / k);
  for (let j = 0; j < m; j++) {
    const i = ids[j];
    x[i] = bandLeft + (j % k) * COL_PITCH;
    y[i] = (Math.floor(j / k) - (rows - 1) / 2) * ROW_PITCH - NODE_H / 2;
  }
}

const bandWidth = (m) => {
  const rowsTarget = Math.max(MIN_ROWS, Math.ceil(Math.sqrt((m * COL_PITCH) / ROW_PITCH)));
  return (Math.ceil(m / rowsTarget) - 1) * COL_PITCH + NODE_W;
};

function orderByBarycenter(ids, adj, y, bary) {
  for (const i of ids) {
    let sum = 0;
    const from = adj.start[i];
    const to = adj.start[i + 1];
    for (let p = from; p < to; p++) sum += y[adj.list[p]];
    bary[i] = to > from ? sum / (to - from) : Infinity;
  }
  ids.sort((a, b) => bary[a] - bary[b] || a - b);
}

/** Edge end points: from the right side of the left node to the left side of the right one. */
function segments(edges, x, y) {
  const seg = new Float32Array(edges.length * 4);
  for (let e = 0; e < edges.length; e++) {
    const [a, b] = edges[e];
    let l = b;
    let r = a;
    if (x[a] < x[b]) [l, r] = [a, b];
    const sideBySide = x[l] + NODE_W <= x[r];
    seg[4 * e] = sideBySide ? x[l] + NODE_W : x[l] + NODE_W / 2;
    seg[4 * e + 1] = y[l] + NODE_H / 2;
    seg[4 * e + 2] = sideBySide ? x[r] : x[r] + NODE_W / 2;
    seg[4 * e + 3] = y[r] + NODE_H / 2;
  }
  return seg;
}

/** Buckets of node indices per CELL×CELL square, for hit tests without a scan of all nodes. */
function grid(n, x, y) {
  const cells = new Map();
  for (let i = 0; i < n; i++) {
    const cx0 = Math.floor(x[i] / CELL);
    const cx1 = Math.floor((x[i] + NODE_W) / CELL);
    const cy0 = Math.floor(y[i] / CELL);
    const cy1 = Math.floor((y[i] + NODE_H) / CELL);
    for (let cx = cx0; cx <= cx1; cx++) {
      for (let cy = cy0; cy <= cy1; cy++) {
        const key = cellKey(cx, cy);
        const list = cells.get(key);
        if (list) list.push(i);
        else cells.set(key, [i]);
      }
    }
  }
  return cells;
}

export const cellKey = (cx, cy) => (cx + 1048576) * 2097152 + (cy + 1048576);

function bounds(n, x, y) {
  let x0 = Infinity;
  let y0 = Infinity;
  let x1 = -Infinity;
  let y1 = -Infinity;
  for (let i = 0; i < n; i++) {
    if (x[i] < x0) x0 = x[i];
    if (y[i] < y0) y0 = y[i];
    if (x[i] > x1) x1 = x[i];
    if (y[i] > y1) y1 = y[i];
  }
  return n ? { x0, y0, x1: x1 + NODE_W, y1: y1 + NODE_H } : { x0: 0, y0: 0, x1: NODE_W, y1: NODE_H };
}

/** Positions (top-left corners) and the derived structures the renderer needs. */
export function layout(graph) {
  const nodes = graph.nodes || [];
  const n = nodes.length;
  const edges = (graph.edges || []).filter(([a, b]) => a >= 0 && b >= 0 && a < n && b < n);
  const layer = new Int32Array(n);
  for (let i = 0; i < n; i++) layer[i] = nodes[i].layer | 0;
  const adj = parents(n, layer, edges);
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  const bary = new Float64Array(n);
  let left = 0;
  let right = 0;
  for (const [L, ids] of columns(n, layer)) {
    if (L !== 0) orderByBarycenter(ids, adj, y, bary);
    const w = bandWidth(ids.length);
    let bandLeft;
    if (L === 0) {
      bandLeft = -w / 2;
      left = bandLeft;
      right = bandLeft + w;
    } else if (L > 0) {
      bandLeft = left - LAYER_GAP - w;
      left = bandLeft;
    } else {
      bandLeft = right + LAYER_GAP;
      right = bandLeft + w;
    }
    placeColumn(ids, bandLeft, x, y);
  }
  const onPath = new Uint8Array(n);
  for (const i of graph.path || []) if (i >= 0 && i < n) onPath[i] = 1;
  const edgeOnPath = new Uint8Array(edges.length);
  for (let e = 0; e < edges.length; e++) edgeOnPath[e] = onPath[edges[e][0]] & onPath[edges[e][1]];
  const byStatus = new Map();
  for (let i = 0; i < n; i++) {
    const s = nodes[i].status;
    const list = byStatus.get(s);
    if (list) list.push(i);
    else byStatus.set(s, [i]);
  }
  return {
    n,
    nodes,
    x,
    y,
    seg: segments(edges, x, y),
    edgeOnPath,
    pathNodes: (graph.path || []).filter((i) => i >= 0 && i < n),
    blocking: (graph.blocking || []).filter((i) => i >= 0 && i < n),
    root: n ? graph.root ?? 0 : -1,
    byStatus,
    cells: grid(n, x, y),
    bounds: bounds(n, x, y),
  };
}
