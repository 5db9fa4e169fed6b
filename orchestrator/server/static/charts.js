// Charts as inline SVG, drawn here (no library, nothing fetched): a line over points, bars
// per day stacked by part, and one bar split into parts. Colours come from the stylesheet
// (classes s0..s5), so dark mode needs nothing here.
const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 190, L = 52, R = 10, T = 12, B = 24;

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
const short = (v) => Math.abs(v) >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k"
  : Math.abs(v) >= 10 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(2);

function frame(label, lo, hi) {
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": label});
  for (const [v, y] of [[hi, T], [lo, H - B]]) {
    root.append(svg("line", {x1: L, x2: W - R, y1: y, y2: y, class: "grid"}));
    root.append(svg("text", {x: L - 4, y: y + 4, "text-anchor": "end", class: "tick"}, short(v)));
  }
  return root;
}

// A line through `points` ([{x, y}], x ascending), with a dot and a tooltip at each.
export function lineChart(label, points, fmt = short, cls = "s0") {
  const ys = points.map((p) => p.y);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
  const x0 = points[0].x, x1 = points[points.length - 1].x;
  const sx = (x) => L + (x1 === x0 ? (W - L - R) / 2 : (x - x0) / (x1 - x0) * (W - L - R));
  const sy = (y) => T + (hi - y) / (hi - lo) * (H - T - B);
  const root = frame(label, lo, hi);
  root.append(svg("polyline", {points: points.map((p) => sx(p.x) + "," + sy(p.y)).join(" "), class: "line " + cls}));
  for (const p of points) {
    const dot = svg("circle", {cx: sx(p.x), cy: sy(p.y), r: 3, class: "dot " + cls});
    dot.append(svg("title", {}, p.x + ": " + fmt(p.y)));
    root.append(dot);
  }
  for (const x of new Set([x0, x1])) {
    root.append(svg("text", {x: sx(x), y: H - 6, "text-anchor": "middle", class: "tick"}, String(x)));
  }
  return root;
}

// Bars per category (days), each stacked from `parts` ([{key, label}]); `line`: an optional
// running line over the bars ({values, label}) and `limit` a horizontal rule (a budget).
export function stackedBars(label, rows, parts, fmt, {line, limit} = {}) {
  const tops = rows.map((r) => parts.reduce((s, p) => s + (r[p.key] || 0), 0));
  const hi = Math.max(1e-9, ...tops, ...(line ? line.values : []), limit || 0);
  const root = frame(label, 0, hi);
  const bw = (W - L - R) / Math.max(rows.length, 1);
  const sy = (v) => T + (hi - v) / hi * (H - T - B);
  rows.forEach((r, i) => {
    let base = 0;
    parts.forEach((p, k) => {
      const v = r[p.key] || 0;
      if (v <= 0) return;
      const rect = svg("rect", {x: L + i * bw + 1, width: Math.max(1, bw - 2), y: sy(base + v),
                                height: Math.max(0.5, sy(base) - sy(base + v)), class: "bar s" + k});
      rect.append(svg("title", {}, `${r.label}: ${p.label} ${fmt(v)}`));
      root.append(rect);
      base += v;
    });
  });
  if (line) {
    const pts = line.values.map((v, i) => `${L + (i + 0.5) * bw},${sy(v)}`).join(" ");
    root.append(svg("polyline", {points: pts, class: "line s4"}));
  }
  if (limit) {
    root.append(svg("line", {x1: L, x2: W - R, y1: sy(limit), y2: sy(limit), class: "limit"}));
    root.append(svg("text", {x: W - R, y: sy(limit) - 3, "text-anchor": "end", class: "tick"}, "budget " + fmt(limit)));
  }
  if (rows.length) {
    root.append(svg("text", {x: L, y: H - 6, class: "tick"}, rows[0].label));
    root.append(svg("text", {x: W - R, y: H - 6, "text-anchor": "end", class: "tick"}, rows[rows.length - 1].label));
  }
  return root;
}

// One bar split into `parts` ([{label, value}]), with a legend below: a share of a whole.
export function splitBar(label, parts, fmt) {
  const total = parts.reduce((s, p) => s + p.value, 0) || 1;
  const root = svg("svg", {viewBox: `0 0 ${W} ${24 + 16 * Math.ceil(parts.length / 2)}`, class: "chart split",
                           role: "img", "aria-label": label});
  let x = 0;
  parts.forEach((p, k) => {
    const w = p.value / total * W;
    const rect = svg("rect", {x, y: 2, width: Math.max(0, w), height: 16, class: "bar s" + (k % 6)});
    rect.append(svg("title", {}, p.label + ": " + fmt(p.value)));
    root.append(rect);
    x += w;
    const lx = (k % 2) * (W / 2), ly = 34 + 16 * Math.floor(k / 2);
    root.append(svg("rect", {x: lx, y: ly - 9, width: 10, height: 10, class: "bar s" + (k % 6)}));
    root.append(svg("text", {x: lx + 14, y: ly, class: "tick"}, p.label + " " + fmt(p.value)));
  });
  return root;
}
