// kvserve KV dashboard: reads GET /v1/kv/events (server-sent events, read with fetch so the
// API key can travel in the Authorization header) and draws each state (docs/dashboard.md).
// Everything the page shows comes from those events; hovering a block asks GET /v1/kv/block.
import { LineChart, decodeBlockMap, drawBlockMap, blockAt, STATE_NAME } from './charts.js';

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'kvserve.apiKey';
const state = {
  key: sessionStorage.getItem(KEY_STORAGE) || '',
  last: null,          // the latest state document
  prev: null,          // the one before (for per-refresh latency means)
  maps: [],            // per group: {states, layout, canvas}
  owners: [],          // per group: Map block id -> [request ids]
  events: [],
  abort: null,
};

const charts = {
  usage: null, throughput: null, latency: null,
};

// ---- formatting -------------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0, v = n;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
  return (u === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)) + ' ' + units[u];
}
const pct = (x) => (100 * x).toFixed(1) + '%';
const rate = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// A bar of stacked segments: [[fraction, color], ...].
function bar(segments, title) {
  const b = el('span', { class: 'bar', title });
  let left = 0;
  for (const [fraction, color] of segments) {
    if (!(fraction > 0)) continue;
    const s = el('span');
    s.style.left = (100 * left) + '%';
    s.style.width = (100 * fraction) + '%';
    s.style.background = color;
    b.append(s);
    left += fraction;
  }
  return b;
}

function setField(name, text, value) {
  for (const e of document.querySelectorAll(`[data-field="${name}"]`)) {
    e.textContent = text;
    if (value !== undefined) e.dataset.value = String(value);
  }
}

// ---- rendering --------------------------------------------------------------------------

function renderCards(s) {
  const e = s.engine;
  setField('sequence', String(s.sequence), s.sequence);
  setField('engine.generation_tokens_per_s', rate(e.generation_tokens_per_s), e.generation_tokens_per_s);
  setField('engine.prompt_tokens_per_s', rate(e.prompt_tokens_per_s), e.prompt_tokens_per_s);
  for (const k of ['running', 'waiting', 'preemptions', 'steps', 'finished']) {
    setField('engine.' + k, String(e[k]), e[k]);
  }
  setField('engine.prefix_hit_rate', pct(e.prefix_hit_rate), e.prefix_hit_rate);
  $('uptime').textContent = s.uptime_s < 120 ? s.uptime_s.toFixed(0) + ' s' : (s.uptime_s / 60).toFixed(1) + ' min';
  $('model').textContent = s.model;
  if (s.events) {
    const streams = s.events.streams;
    $('refresh').textContent = (s.events.interval_ms / 1000).toFixed(2).replace(/\.?0+$/, '') + ' s' +
      (streams > 1 ? ` · ${streams} dashboards open` : '');
  }
}

function groupOwners(s) {
  return s.groups.map((_, g) => {
    const owners = new Map();
    for (const r of s.requests) {
      for (const [first, count] of r.block_runs[g]) {
        for (let b = first; b < first + count; ++b) {
          if (!owners.has(b)) owners.set(b, []);
          owners.get(b).push(r.id);
        }
      }
    }
    return owners;
  });
}

function renderGroups(s) {
  const box = $('groups');
  if (box.children.length !== s.groups.length) {
    box.replaceChildren();
    state.maps = s.groups.map((g, index) => {
      const title = el('div', { class: 'title' });
      const canvas = el('canvas', { class: 'map', 'data-group': String(index) });
      box.append(el('div', { class: 'group' }, title, canvas));
      canvas.addEventListener('mousemove', (ev) => hover(index, ev));
      canvas.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
      return { title, canvas, states: null, layout: null };
    });
  }
  state.owners = groupOwners(s);
  s.groups.forEach((g, index) => {
    const m = state.maps[index];
    const b = g.blocks;
    m.title.replaceChildren(
      el('b', { text: `group ${index} · ${g.kind}` }),
      ` · ${g.spec} · `,
      el('span', { 'data-field': `groups.${index}.blocks.used`, 'data-value': String(b.used), text: String(b.used) }), ' used · ',
      el('span', { 'data-field': `groups.${index}.blocks.cached`, 'data-value': String(b.cached), text: String(b.cached) }), ' cached · ',
      el('span', { 'data-field': `groups.${index}.blocks.free`, 'data-value': String(b.free), text: String(b.free) }), ' free of ',
      el('span', { 'data-field': `groups.${index}.blocks.total`, 'data-value': String(b.total), text: String(b.total) }),
      ` blocks · ${bytes(g.bytes.used)} of ${bytes(g.bytes.total)} used · ${g.evictions} evictions`);
    m.states = decodeBlockMap(g.map, b.total + 1);
    m.layout = drawBlockMap(m.canvas, m.states);
    m.canvas.dataset.map = g.map;
  });
}

function renderTiers(s) {
  const body = $('tiers').tBodies[0];
  body.replaceChildren();
  $('no-tiers').hidden = s.tiers.length > 0;
  for (const t of s.tiers) {
    const occupancy = t.capacity_bytes ? t.usage_bytes / t.capacity_bytes : 0;
    const occ = t.capacity_bytes
      ? [bar([[occupancy, 'var(--' + t.tier + ')']], pct(occupancy)), ` ${bytes(t.usage_bytes)} / ${bytes(t.capacity_bytes)}`]
      : [`${bytes(t.usage_bytes)} (unbounded)`];
    const cell = (field, text) => el('td', { 'data-field': `tiers.${t.tier}.${field}`, 'data-value': String(t[field]), text });
    body.append(el('tr', { 'data-tier': t.tier },
      el('td', { text: t.tier }), el('td', {}, ...occ), cell('blocks', String(t.blocks)),
      el('td', {}, el('span', { 'data-field': `tiers.${t.tier}.hits`, 'data-value': String(t.hits), text: String(t.hits) }),
        ' / ', el('span', { 'data-field': `tiers.${t.tier}.lookups`, 'data-value': String(t.lookups), text: String(t.lookups) })),
      el('td', { text: pct(t.hit_rate) }),
      el('td', {}, el('span', { 'data-field': `tiers.${t.tier}.loads`, 'data-value': String(t.loads), text: String(t.loads) }), ` (${bytes(t.loaded_bytes)})`),
      el('td', {}, el('span', { 'data-field': `tiers.${t.tier}.stores`, 'data-value': String(t.stores), text: String(t.stores) }), ` (${bytes(t.stored_bytes)})`),
      cell('evictions', String(t.evictions)), cell('errors', String(t.errors))));
  }
}

const SOURCES = [['device', 'var(--device)'], ['cpu', 'var(--cpu)'], ['file', 'var(--file)'],
  ['redis', 'var(--redis)'], ['computed', 'var(--computed)']];
const MAX_ROWS = 100;

function renderRequests(s) {
  const body = $('requests').tBodies[0];
  body.replaceChildren();
  const counts = {};
  for (const r of s.requests) counts[r.state] = (counts[r.state] || 0) + 1;
  $('request-count').textContent = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(' · ') || 'none';
  for (const r of s.requests.slice(0, MAX_ROWS)) {
    const p = Math.max(r.prompt_tokens, 1);
    const sources = SOURCES.map(([k, c]) => [r.sources[k] / p, c]);
    const title = SOURCES.filter(([k]) => r.sources[k] > 0).map(([k]) => `${k} ${r.sources[k]}`).join(', ');
    const computed = Math.min(r.computed_tokens, r.prompt_tokens) / p;
    body.append(el('tr', { 'data-request': String(r.id) },
      el('td', { text: String(r.id) }),
      el('td', {}, el('span', { class: 'state ' + r.state, text: r.state })),
      el('td', {}, bar([[computed, 'var(--used)']], `${r.computed_tokens} computed`), ` ${r.prompt_tokens}`),
      el('td', { 'data-sources': JSON.stringify(r.sources) }, bar(sources, title), ' ' + title),
      el('td', {}, bar([[r.output_tokens / Math.max(r.max_tokens, 1), 'var(--shared)']], ''), ` ${r.output_tokens} / ${r.max_tokens}`),
      el('td', { text: r.blocks.join(' + ') }),
      el('td', { text: String(r.preemptions) })));
  }
  if (s.requests.length > MAX_ROWS) {
    body.append(el('tr', {}, el('td', { colspan: '7', text: `… ${s.requests.length - MAX_ROWS} more` })));
  }
}

function logEvent(html) {
  const list = $('events');
  const item = el('li');
  const time = new Date().toLocaleTimeString();
  item.append(`${time} `, ...html);
  list.prepend(item);
  while (list.children.length > 100) list.lastChild.remove();
}

// Notable changes since the previous state: preemptions, tier loads, evictions.
function noteEvents(s, prev) {
  if (!prev) return;
  const dp = s.engine.preemptions - prev.engine.preemptions;
  if (dp > 0) logEvent([el('b', { text: `${dp} preemption${dp > 1 ? 's' : ''}` }), ' (the newest request lost its blocks)']);
  for (const t of s.tiers) {
    const before = prev.tiers.find((x) => x.tier === t.tier);
    if (!before) continue;
    const hits = t.hits - before.hits;
    if (hits > 0) logEvent([el('b', { text: `${hits} ${t.tier} tier hit${hits > 1 ? 's' : ''}` }), ` (${t.hits} so far)`]);
  }
  const seen = new Set(prev.requests.map((r) => r.id));
  for (const r of s.requests) {
    const tiers = ['cpu', 'file', 'redis'].filter((k) => r.sources[k] > 0);
    const wasLoaded = prev.requests.find((x) => x.id === r.id);
    if (tiers.length && (!seen.has(r.id) || ['cpu', 'file', 'redis'].every((k) => !wasLoaded.sources[k]))) {
      logEvent([`request ${r.id}: `, el('b', { text: tiers.map((k) => `${r.sources[k]} tokens from ${k}`).join(', ') })]);
    }
  }
}

function meanDelta(h, before) {
  if (!before) return NaN;
  const n = h.count - before.count;
  return n > 0 ? (1000 * (h.sum - before.sum)) / n : NaN;
}

function renderCharts(s, prev) {
  if (!charts.usage) {
    const palette = ['#22c55e', '#3b82f6', '#eab308', '#a855f7', '#f97316', '#ef4444'];
    charts.usage = new LineChart($('usage-chart'), s.groups.flatMap((g, i) => [
      { name: `g${i} used %`, color: palette[(2 * i) % palette.length] },
      { name: `g${i} cached %`, color: palette[(2 * i + 1) % palette.length] }]), { fixedMax: 100 });
    charts.throughput = new LineChart($('throughput-chart'), [
      { name: 'generation', color: '#22c55e' }, { name: 'prompt', color: '#3b82f6' }]);
    charts.latency = new LineChart($('latency-chart'), [
      { name: 'TTFT', color: '#f97316' }, { name: 'ITL', color: '#a855f7' }]);
  }
  charts.usage.push(s.uptime_s, s.groups.flatMap((g) => [
    (100 * g.blocks.used) / g.blocks.total, (100 * g.blocks.cached) / g.blocks.total]));
  charts.throughput.push(s.uptime_s, [s.engine.generation_tokens_per_s, s.engine.prompt_tokens_per_s]);
  charts.latency.push(s.uptime_s, [meanDelta(s.engine.ttft_s, prev && prev.engine.ttft_s),
    meanDelta(s.engine.itl_s, prev && prev.engine.itl_s)]);
  for (const c of Object.values(charts)) c.draw();
}

function renderAccounting(s) {
  if ($('report').dataset.done) return;
  $('report').textContent = s.settings.capacity_report.join('\n');
  const body = $('settings').tBodies[0];
  const k = s.settings;
  const rows = [
    ['--kv-cache-memory-bytes', bytes(k.kv_cache_memory_bytes)], ['--kv-cache-dtype', k.kv_cache_dtype],
    ['--block-size', k.block_size], ['--max-model-len', k.max_model_len], ['--max-num-seqs', k.max_num_seqs],
    ['--max-num-batched-tokens', k.max_num_batched_tokens], ['prefix caching', k.enable_prefix_caching ? 'on' : 'off'],
    ['--threads', k.threads], ['KV cache tokens', k.kv_cache_tokens],
    ['bytes per token', bytes(k.bytes_per_token)], ['max concurrency at max-model-len', k.max_concurrency.toFixed(2)],
  ];
  for (const g of s.groups) rows.push([`group ${g.index} bytes/token`, g.bytes_per_token_formula]);
  body.replaceChildren(...rows.map(([a, b]) => el('tr', {}, el('td', { text: a }), el('td', { text: String(b) }))));
  $('report').dataset.done = '1';
}

function render(s) {
  const prev = state.last;
  state.prev = prev;
  state.last = s;
  renderCards(s);
  renderGroups(s);
  renderTiers(s);
  renderRequests(s);
  renderCharts(s, prev);
  renderAccounting(s);
  noteEvents(s, prev);
  document.body.dataset.sequence = String(s.sequence);
}

// ---- hover ------------------------------------------------------------------------------

let hoverTimer = null;
function hover(group, ev) {
  const m = state.maps[group];
  const rect = m.canvas.getBoundingClientRect();
  const b = blockAt(m.layout, ev.clientX - rect.left, ev.clientY - rect.top);
  const tip = $('tooltip');
  if (b < 0) { tip.hidden = true; return; }
  const letter = String.fromCharCode(m.states[b]);
  const owners = (state.owners[group] && state.owners[group].get(b)) || [];
  const lines = [`group ${group} · block ${b}: ${STATE_NAME[letter] || letter}`];
  if (owners.length) lines.push(`held by request${owners.length > 1 ? 's' : ''} ${owners.join(', ')}`);
  else if (letter === 'c') lines.push('in the prefix cache, held by no request');
  tip.textContent = lines.join('\n');
  tip.hidden = false;
  tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 300) + 'px';
  tip.style.top = (ev.clientY + 12) + 'px';
  clearTimeout(hoverTimer);
  hoverTimer = setTimeout(async () => {
    const r = await fetch(`/v1/kv/block?group=${group}&id=${b}`, { headers: authHeaders() });
    if (!r.ok || tip.hidden) return;
    const d = await r.json();
    tip.textContent = lines.concat([`ref count ${d.ref_count}`, `prefix hash ${d.hash || '(none)'}`]).join('\n');
  }, 120);
}

// ---- connection -------------------------------------------------------------------------

function authHeaders() {
  return state.key ? { Authorization: 'Bearer ' + state.key } : {};
}

function setStatus(kind, text) {
  const s = $('status');
  s.dataset.state = kind;
  s.textContent = text;
}

function askForKey(refused) {
  $('main').hidden = true;
  $('key-form').hidden = false;
  $('key-error').hidden = !refused;
  setStatus('key', 'API key needed');
  $('key-input').focus();
}

// Reads the event stream until it ends; returns the HTTP status (0 when it never answered).
async function readEvents() {
  state.abort = new AbortController();
  const response = await fetch('/v1/kv/events', { headers: authHeaders(), signal: state.abort.signal, cache: 'no-store' });
  if (!response.ok) return response.status;
  $('main').hidden = false;
  $('key-form').hidden = true;
  $('forget-key').hidden = !state.key;
  setStatus('live', 'live');
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return 200;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
      if (data) render(JSON.parse(data));
    }
  }
}

async function connect() {
  let delay = 500;
  for (;;) {
    let status = 0;
    try {
      status = await readEvents();
    } catch (e) {
      status = 0;
    }
    if (status === 401) {
      askForKey(Boolean(state.key));
      return;
    }
    setStatus('error', status ? `HTTP ${status}, retrying` : 'disconnected, retrying');
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

function start() {
  $('key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.key = $('key-input').value;
    sessionStorage.setItem(KEY_STORAGE, state.key);
    $('key-form').hidden = true;
    setStatus('connecting', 'connecting');
    connect();
  });
  $('forget-key').addEventListener('click', () => {
    sessionStorage.removeItem(KEY_STORAGE);
    state.key = '';
    if (state.abort) state.abort.abort();
    askForKey(false);
  });
  window.addEventListener('resize', () => { if (state.last) { renderGroups(state.last); for (const c of Object.values(charts)) if (c) c.draw(); } });
  connect();
}

start();
