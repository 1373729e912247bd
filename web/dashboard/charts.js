// Hand-written canvas drawing for the KV dashboard: time-series line charts and the block map.
// No library: the block map needs its own cell grid anyway, and a few line charts are less code
// than embedding one.

const COLORS = {
  used: '#22c55e', shared: '#eab308', cached: '#3b82f6', free: '#2a303c', null: '#000000',
};
export const STATE_COLOR = { u: COLORS.used, s: COLORS.shared, c: COLORS.cached, f: COLORS.free, n: COLORS.null };
export const STATE_NAME = { u: 'used', s: 'shared', c: 'cached', f: 'free', n: 'null' };

// Sizes a canvas's backing store to its CSS box times the device pixel ratio; returns the
// 2D context scaled so that drawing uses CSS pixels.
function fitCanvas(canvas, cssHeight) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(1, canvas.clientWidth);
  if (cssHeight !== undefined) canvas.style.height = cssHeight + 'px';
  const height = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width, height };
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function formatTick(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + 'k';
  if (v >= 10 || v === 0) return v.toFixed(0);
  return v.toPrecision(2);
}

// A line chart over the last `capacity` points. series: [{name, color}]; push({t, values}).
export class LineChart {
  constructor(canvas, series, { capacity = 240, fixedMax } = {}) {
    this.canvas = canvas;
    this.series = series;
    this.capacity = capacity;
    this.fixedMax = fixedMax;
    this.points = [];
  }

  push(t, values) {
    this.points.push({ t, values });
    if (this.points.length > this.capacity) this.points.shift();
  }

  draw() {
    const { ctx, width, height } = fitCanvas(this.canvas);
    ctx.clearRect(0, 0, width, height);
    const left = 40, right = 8, top = 18, bottom = 16;
    const w = width - left - right, h = height - top - bottom;
    let max = this.fixedMax || 0;
    if (!this.fixedMax) {
      for (const p of this.points) for (const v of p.values) if (Number.isFinite(v)) max = Math.max(max, v);
      max = niceMax(max);
    }
    ctx.font = '11px system-ui, sans-serif';
    ctx.strokeStyle = '#262c38';
    ctx.fillStyle = '#8a93a3';
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; ++i) {
      const y = top + h - (h * i) / 4 + 0.5;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + w, y); ctx.stroke();
      ctx.fillText(formatTick((max * i) / 4), 2, y + 4);
    }
    let x = left;
    for (const s of this.series) {  // legend
      ctx.fillStyle = s.color; ctx.fillRect(x, 4, 10, 3);
      ctx.fillStyle = '#8a93a3'; ctx.fillText(s.name, x + 14, 10);
      x += 22 + ctx.measureText(s.name).width;
    }
    if (this.points.length < 2) return;
    const t0 = this.points[0].t, t1 = this.points[this.points.length - 1].t;
    const span = Math.max(t1 - t0, 1e-9);
    ctx.fillStyle = '#8a93a3';
    ctx.fillText(`-${span.toFixed(0)} s`, left, height - 3);
    this.series.forEach((s, k) => {
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let started = false;
      for (const p of this.points) {
        const v = p.values[k];
        if (!Number.isFinite(v)) { started = false; continue; }
        const px = left + ((p.t - t0) / span) * w;
        const py = top + h - (Math.min(v, max) / max) * h;
        if (started) ctx.lineTo(px, py); else ctx.moveTo(px, py);
        started = true;
      }
      ctx.stroke();
    });
  }
}

// "n1u12c40f201" -> Uint8Array of state letters' char codes, one per block id.
export function decodeBlockMap(map, numBlocks) {
  const out = new Uint8Array(numBlocks);
  let i = 0, at = 0;
  while (i < map.length) {
    const letter = map.charCodeAt(i++);
    let n = 0;
    while (i < map.length && map[i] >= '0' && map[i] <= '9') n = n * 10 + (map.charCodeAt(i++) - 48);
    out.fill(letter, at, Math.min(at + n, numBlocks));
    at += n;
  }
  return out;
}

// Draws one cell per block (block 0, the null block, included) in rows that fill the canvas
// width; returns the layout for hit testing.
export function drawBlockMap(canvas, states) {
  const n = states.length;
  const width = Math.max(1, canvas.clientWidth);
  const maxHeight = 260;
  let cell = Math.floor(Math.sqrt((width * maxHeight) / Math.max(n, 1)));
  cell = Math.max(2, Math.min(16, cell));
  const cols = Math.max(1, Math.floor(width / cell));
  const rows = Math.ceil(n / cols);
  const { ctx } = fitCanvas(canvas, rows * cell);
  ctx.clearRect(0, 0, width, rows * cell);
  const gap = cell >= 6 ? 1 : 0;
  for (const [letter, color] of Object.entries(STATE_COLOR)) {
    const code = letter.charCodeAt(0);
    ctx.fillStyle = color;
    for (let b = 0; b < n; ++b) {
      if (states[b] !== code) continue;
      ctx.fillRect((b % cols) * cell, Math.floor(b / cols) * cell, cell - gap, cell - gap);
    }
  }
  return { cell, cols, n };
}

// The block id under CSS pixel (x, y) of a map drawn with `layout`, or -1.
export function blockAt(layout, x, y) {
  if (!layout) return -1;
  const col = Math.floor(x / layout.cell), row = Math.floor(y / layout.cell);
  if (col < 0 || col >= layout.cols || row < 0) return -1;
  const b = row * layout.cols + col;
  return b < layout.n ? b : -1;
}
