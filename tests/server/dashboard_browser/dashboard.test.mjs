// The live KV dashboard in real browsers: Debian's headless Chromium (DevTools protocol) and
// Firefox (WebDriver BiDi), both driven by puppeteer-core, open /dashboard of a real
// `kvserve serve` (stories260K, a small device pool, a CPU and a file tier, --api-key) while
// `kvserve bench serve --dashboard` drives load. Started by tests/server/dashboard_browser_test.cc,
// which passes:
//   KVSERVE_BASE_URL, KVSERVE_API_KEY, KVSERVE_BINARY, KVSERVE_SCREENSHOT_DIR,
//   KVSERVE_BENCH_ARGS (the load, space separated).
// Checks, in each browser: the endpoints refuse without the key and the page asks for it; the
// page's numbers equal /v1/kv/state of the very frame it shows and lie between /metrics read
// before and after it; when the load ends they equal /metrics exactly; the block map changes
// as requests come and go; preemptions and tier hits appear; hover names a block's holders and
// prefix hash; the layout fits 1280x800 and a phone's width; the page logs no error.
// Screenshots go to KVSERVE_SCREENSHOT_DIR (dashboard-<browser>-1280x800.png, -phone.png,
// -after-load.png). A browser that is not installed is skipped, saying so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const BASE = process.env.KVSERVE_BASE_URL;
const KEY = process.env.KVSERVE_API_KEY;
const SHOTS = process.env.KVSERVE_SCREENSHOT_DIR || tmpdir();
const AUTH = { Authorization: `Bearer ${KEY}` };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const BROWSERS = {
  chromium: {
    browser: 'chrome', executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  },
  firefox: { browser: 'firefox', executablePath: '/usr/bin/firefox', args: [] },
};

async function state(query = '') {
  const r = await fetch(`${BASE}/v1/kv/state${query}`, { headers: AUTH });
  const body = await r.text();
  assert.equal(r.status, 200, body);
  return JSON.parse(body);
}

// name{labels} -> value, for the series this test reads.
async function metrics() {
  const text = await (await fetch(`${BASE}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^kvserve:(\w+)(\{[^}]*\})? (\S+)$/);
    if (!m) continue;
    const tier = m[2] && m[2].match(/tier="(\w+)"/);
    out[m[1] + (tier ? `.${tier[1]}` : '')] = Number(m[3]);
  }
  return out;
}

// Every [data-field] number the page shows, and the sequence of the state it shows, read in
// one task of the page (so from one render).
async function pageNumbers(page) {
  return page.evaluate(() => {
    const out = { sequence: Number(document.body.dataset.sequence || 0) };
    for (const e of document.querySelectorAll('[data-field][data-value]')) {
      out[e.dataset.field] = Number(e.textContent.replace('%', ''));
      out[e.dataset.field + '#value'] = Number(e.dataset.value);
    }
    const map = document.querySelector('canvas.map');
    out.map = map ? map.dataset.map : '';
    return out;
  });
}

async function nextFrame(page, after) {
  await page.waitForFunction((s) => Number(document.body.dataset.sequence || 0) > s,
    { timeout: 10000, polling: 50 }, after);
}

// The numbers the page shows against the same frame's JSON.
function expectSameFrame(shown, s) {
  const g = s.groups[0].blocks;
  for (const k of ['used', 'cached', 'free', 'total']) {
    assert.equal(shown[`groups.0.blocks.${k}`], g[k], `groups.0.blocks.${k} in frame ${s.sequence}`);
  }
  for (const k of ['running', 'waiting', 'preemptions', 'steps', 'finished']) {
    assert.equal(shown[`engine.${k}`], s.engine[k], `engine.${k} in frame ${s.sequence}`);
  }
  for (const t of s.tiers) {
    for (const k of ['hits', 'lookups', 'loads', 'stores', 'blocks', 'evictions', 'errors']) {
      assert.equal(shown[`tiers.${t.tier}.${k}`], t[k], `tiers.${t.tier}.${k} in frame ${s.sequence}`);
    }
  }
  assert.equal(shown.map, s.groups[0].map);
}

// Counters only grow: what the page shows lies between /metrics read before and after.
const BRACKETED = [['engine.steps', 'engine_steps_total'], ['engine.preemptions', 'num_preemptions_total'],
  ['engine.finished', 'request_success_total'], ['tiers.cpu.hits', 'offload_hits_total.cpu'],
  ['tiers.file.hits', 'offload_hits_total.file'], ['tiers.cpu.stores', 'offload_stores_total.cpu'],
  ['tiers.file.loads', 'offload_loads_total.file']];

// `seed`: its own prompts, so a second browser's load finds nothing of the first's cached.
function startLoad(seed) {
  const args = ['bench', 'serve', '--base-url', BASE, '--api-key', KEY, '--dashboard',
    '--seed', String(seed), ...process.env.KVSERVE_BENCH_ARGS.split(' ')];
  const child = spawn(process.env.KVSERVE_BINARY, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', () => {});
  const done = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  return { done, output: () => out, kill: () => child.kill('SIGKILL') };
}

// Moves the mouse over a used block of group 0; true when the tooltip names its holder and,
// once /v1/kv/block answered, its prefix hash.
async function hoverUsedBlock(page) {
  const target = await page.evaluate(() => {
    const canvas = document.querySelector('canvas.map');
    const runs = canvas.dataset.map.match(/[a-z]\d+/g);
    let at = 0;
    for (const r of runs) {
      if (r[0] === 'u' || r[0] === 's') break;
      at += Number(r.slice(1));
    }
    const box = canvas.getBoundingClientRect();
    const n = runs.reduce((s, r) => s + Number(r.slice(1)), 0);
    let cell = Math.floor(Math.sqrt((canvas.clientWidth * 260) / n));
    cell = Math.max(2, Math.min(16, cell));
    const cols = Math.floor(canvas.clientWidth / cell);
    return { x: box.left + (at % cols) * cell + cell / 2, y: box.top + Math.floor(at / cols) * cell + cell / 2 };
  });
  // Off the map first: a move to where the mouse already is fires no event.
  await page.mouse.move(1, 1);
  await page.mouse.move(target.x, target.y, { steps: 2 });
  try {
    await page.waitForFunction(() => {
      const t = document.getElementById('tooltip');
      return !t.hidden && /held by request/.test(t.textContent) && /prefix hash/.test(t.textContent);
    }, { timeout: 2000, polling: 50 });
    return true;
  } catch {
    return false;
  }
}

// The key: asked for, a wrong one refused, the right one accepted; then the page is live.
async function enterKey(page) {
  await page.goto(`${BASE}/dashboard`);
  await page.waitForSelector('#key-form:not([hidden])');
  assert.equal(await page.$eval('#main', (e) => e.hidden), true, 'the state shows before the key');
  await page.locator('#key-input').fill('wrong');
  await page.click('#key-form button[type=submit]');
  await page.waitForSelector('#key-error:not([hidden])');
  await page.locator('#key-input').fill(KEY);
  await page.click('#key-form button[type=submit]');
  await page.waitForSelector('#status[data-state="live"]');
  await nextFrame(page, 0);
}

// One frame the page shows: equal to /v1/kv/state of that frame, inside /metrics read before
// and after it. The frame must have been taken after the first /metrics read (by its unix_ms):
// a page on a busy machine may show a frame a while after the server took it. Returns the
// numbers shown; counts into `seen`.
async function checkFrame(page, seen) {
  const before = await metrics();
  const beforeMs = Date.now();
  let shown, frame = null;
  for (let tries = 0; tries < 40; ++tries) {
    const first = await pageNumbers(page);
    await nextFrame(page, first.sequence);
    shown = await pageNumbers(page);
    const r = await fetch(`${BASE}/v1/kv/state?sequence=${shown.sequence}`, { headers: AUTH });
    frame = r.status === 200 ? await r.json() : null;  // 404: no longer kept
    if (frame && frame.unix_ms > beforeMs) break;
  }
  const after = await metrics();
  seen.maps.add(shown.map);
  seen.used ||= /[us]/.test(shown.map);
  if (!frame) return shown;
  expectSameFrame(shown, frame);
  ++seen.sameFrame;
  if (frame.unix_ms <= beforeMs) return shown;
  for (const [field, metric] of BRACKETED) {
    if (shown[field] === undefined || before[metric] === undefined) continue;
    assert.ok(before[metric] <= shown[field] && shown[field] <= after[metric],
      `${field} = ${shown[field]} outside /metrics [${before[metric]}, ${after[metric]}]`);
  }
  ++seen.bracketed;
  return shown;
}

// Checks frames while `bench serve` loads run: once enough were checked (and a frame showed
// this load's preemptions and tier hits) the load is stopped, so a slow machine need not wait
// for the rest of it; when a fast one's load ends first, another follows with the next seed (at
// most three, started within a minute). Saves the 1280x800 and phone screenshots on the way.
async function followLoad(page, name, seed) {
  const start = await metrics();
  const seen = { maps: new Set(), used: false, sameFrame: 0, bracketed: 0 };
  let hovered = false, busyShot = false, phone = false;
  const t0 = Date.now();
  for (let round = 0; round < 3 && (round === 0 || Date.now() - t0 < 60000); ++round) {
    const load = startLoad(seed + 10 * round);
    let stopped = false;
    try {
      const loadEnded = load.done.then((code) => { load.code = code; });
      while (load.code === undefined && !stopped) {
        const shown = await checkFrame(page, seen);
        // The screenshot: at the first frame with a block in use, again once the load has
        // preempted and hit a tier (a fuller picture, the README's).
        const busy = shown['engine.preemptions'] > start.num_preemptions_total &&
          shown['tiers.cpu.hits'] + shown['tiers.file.hits'] >
            start['offload_hits_total.cpu'] + start['offload_hits_total.file'];
        if (shown['groups.0.blocks.used'] > 0 && (!hovered || (busy && !busyShot))) {
          hovered = (await hoverUsedBlock(page)) || hovered;
          busyShot = busy;
          await page.screenshot({ path: path.join(SHOTS, `dashboard-${name}-1280x800.png`) });
        }
        if (!phone && seen.maps.size >= 3) {
          phone = true;
          await page.setViewport({ width: 390, height: 844 });
          await nextFrame(page, shown.sequence);
          await page.screenshot({ path: path.join(SHOTS, `dashboard-${name}-phone.png`), fullPage: true });
          const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
          assert.ok(overflow <= 1, `the phone layout is ${overflow} px wider than the screen`);
          await page.setViewport({ width: 1280, height: 800 });
        }
        const enough = seen.sameFrame >= 3 && seen.bracketed >= 3 && seen.maps.size >= 3;
        if (enough && phone && hovered && busyShot) {
          stopped = true;
          load.kill();
        }
      }
      await loadEnded;
      if (!stopped) assert.equal(load.code, 0, `bench serve failed:\n${load.output()}`);
      assert.match(load.output(), new RegExp(`Live KV dashboard: ${BASE}/dashboard`));
    } finally {
      if (load.code === undefined) load.kill();
    }
    console.log(`# ${name}, load ${round + 1}: ${seen.sameFrame} frames equal to /v1/kv/state, ` +
      `${seen.bracketed} inside /metrics, ${seen.maps.size} block-map shapes`);
    const enough = seen.sameFrame >= 3 && seen.bracketed >= 3 && seen.maps.size >= 3;
    if (enough && phone && hovered) break;
  }
  assert.ok(seen.sameFrame >= 3, `only ${seen.sameFrame} frames compared with /v1/kv/state`);
  assert.ok(seen.bracketed >= 3, `only ${seen.bracketed} frames compared with /metrics`);
  assert.ok(seen.maps.size >= 3, `the block map took only ${seen.maps.size} shapes under load`);
  assert.ok(phone, 'the phone layout was never checked');
  assert.ok(seen.used, `no block was ever shown in use: ${[...seen.maps].join(' ')}`);
  assert.ok(hovered, 'hovering a used block did not name its holder and hash');
}

// Quiet: the next frame equals /metrics exactly, every block is back, and the page reported
// the preemptions and tier hits the load caused (`before`: /metrics before the load).
async function expectQuiet(page, name, before) {
  // A stopped load's requests end once the server sees their clients gone.
  for (let i = 0; i < 300; ++i) {
    const now = await metrics();
    if (now.num_requests_running === 0 && now.num_requests_waiting === 0 &&
        now.kv_cache_used_blocks === 0) break;
    await sleep(100);
  }
  await sleep(300);
  const m = await metrics();
  const q = await pageNumbers(page);
  await nextFrame(page, q.sequence);
  const end = await pageNumbers(page);
  expectSameFrame(end, await state(`?sequence=${end.sequence}`));
  assert.equal(end['groups.0.blocks.used'], 0);
  assert.ok(!/[us]/.test(end.map), 'blocks still shown in use after the load');
  assert.equal(end['engine.running'], 0);
  assert.equal(end['engine.steps'], m.engine_steps_total);
  assert.equal(end['engine.preemptions'], m.num_preemptions_total);
  assert.equal(end['engine.finished'], m.request_success_total);
  assert.equal(end['groups.0.blocks.used'], m.kv_cache_used_blocks);
  assert.equal(end['groups.0.blocks.total'], m.kv_cache_total_blocks);
  for (const tier of ['cpu', 'file']) {
    for (const k of ['hits', 'lookups', 'loads', 'stores', 'evictions', 'errors']) {
      assert.equal(end[`tiers.${tier}.${k}`], m[`offload_${k}_total.${tier}`], `tiers.${tier}.${k}`);
    }
    assert.equal(end[`tiers.${tier}.blocks`], m[`offload_blocks.${tier}`], `tiers.${tier}.blocks`);
  }
  // This load preempted and hit the tiers, and the page says so.
  assert.ok(end['engine.preemptions'] > before.num_preemptions_total, 'the load never preempted');
  assert.ok(end['tiers.cpu.hits'] + end['tiers.file.hits'] >
    before['offload_hits_total.cpu'] + before['offload_hits_total.file'], 'no tier hit');
  const log = await page.$eval('#events', (e) => e.textContent);
  assert.match(log, /preemption/);
  assert.match(log, /tier hit/);
  await page.screenshot({ path: path.join(SHOTS, `dashboard-${name}-after-load.png`), fullPage: true });
}

test('endpoints refuse without the API key', async () => {
  for (const p of ['/v1/kv/state', '/v1/kv/events', '/v1/kv/block?group=0&id=1']) {
    const r = await fetch(BASE + p);
    assert.equal(r.status, 401, p);
    const bad = await fetch(BASE + p, { headers: { Authorization: 'Bearer wrong' } });
    assert.equal(bad.status, 401, p);
  }
  const page = await fetch(`${BASE}/dashboard`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-security-policy'), /default-src 'none'/);
});

for (const [index, [name, options]] of Object.entries(BROWSERS).entries()) {
  const missing = !existsSync(options.executablePath) && `${options.executablePath} is not installed`;
  test(`${name}: the live page against /v1/kv/state and /metrics under load`,
    { timeout: 180000, skip: missing }, async () => {
      mkdirSync(SHOTS, { recursive: true });
      const browser = await puppeteer.launch({ ...options, headless: true });
      try {
        const page = await browser.newPage();
        await page.setViewport({ width: 1280, height: 800 });
        const errors = [];
        page.on('pageerror', (e) => errors.push(String(e)));
        page.on('console', (m) => {  // the 401s of the key prompt are expected
          if (m.type() === 'error' && !/401/.test(m.text())) errors.push(m.text());
        });
        await enterKey(page);
        const before = await metrics();
        await followLoad(page, name, index + 1);
        await expectQuiet(page, name, before);
        assert.deepEqual(errors, [], 'the page logged errors');
      } finally {
        await browser.close();
      }
    });
}
