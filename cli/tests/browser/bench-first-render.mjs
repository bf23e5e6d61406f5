// The console's first render of a large site, in headless chromium.
//
// Builds a stopped store of N nodes (default 10,000) in 10 zones with a
// week of history (every node registered, Ready, and flapping now and then;
// some NotReady or Unknown now) through `nodekeeper db import`, serves it
// with `nodekeeper ui`, and loads the overview several times, printing when
// the node list had arrived, when the tiles were built and when they were
// painted (after the next frame), measured from navigation start. Also
// prints the size of the console's assets, raw and gzipped.
//
//   node bench-first-render.mjs --bin target/release/nodekeeper [--nodes 10000] [--runs 7]
//        [--listen 127.88.0.1:0] [--store DIR (kept, and reused when it holds a store)]

import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir, cpus } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { launch, newPage } from './lib.mjs';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
};
const BIN = option('bin', 'target/release/nodekeeper');
const NODES = Number(option('nodes', '10000'));
const RUNS = Number(option('runs', '7'));
const LISTEN = option('listen', '127.88.0.1:0');
// While iterating: build the store once in this directory and keep it.
const STORE = option('store', '');
const ZONES = 10;
const DAY = 86_400_000;

/** A deterministic pseudo-random sequence, so every run builds the same site. */
function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const iso = (ms) => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

function condition(status, time, reason, message) {
  return { type: 'Ready', status, lastHeartbeatTime: iso(time), lastTransitionTime: iso(time), reason, message };
}

/** An export (see `nodekeeper db export`) of the made-up site. */
function buildExport(path) {
  const rand = random(42);
  const now = Date.now() - 60_000;
  const start = now - 7 * DAY;
  const events = [];
  const nodes = [];
  for (let i = 0; i < NODES; i++) {
    const name = `edge-${String(i).padStart(5, '0')}`;
    const zone = `zone-${String.fromCharCode(97 + (i % ZONES))}`;
    const registered = start + Math.floor(rand() * 3_600_000);
    const record = {
      name,
      uid: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      creationTimestamp: iso(registered),
      resourceVersion: 0,
      source: 'static',
      labels: { 'topology.kubernetes.io/zone': zone, rack: `r${i % 40}` },
      externalID: name,
      providerID: '',
      capacity: { cpuMillis: 4000, memoryBytes: 8 * 2 ** 30 },
      unschedulable: false,
      taints: [],
      addresses: [{ type: 'InternalIP', address: `10.${Math.floor(i / 250)}.${i % 250}.1` }],
      conditions: [condition('Unknown', registered, 'NodeStatusNeverUpdated', 'Kubelet never posted node status.')],
    };
    events.push({ time: registered, node: name, kind: 'Registered', record: structuredClone(record) });
    let status = 'True';
    let at = registered + 1000;
    events.push({ time: at, node: name, kind: 'ConditionChanged', condition: 'Ready', from: 'Unknown', to: 'True', reason: 'KubeletReady', message: 'kubelet /healthz endpoint returns ok' });
    // Flaps over the week: down for a few minutes now and then.
    const flaps = Math.floor(rand() * 4);
    for (let f = 0; f < flaps; f++) {
      const down = at + Math.floor(rand() * (now - at - 3_600_000));
      if (down <= at) continue;
      const to = rand() < 0.5 ? 'False' : 'Unknown';
      events.push({ time: down, node: name, kind: 'ConditionChanged', condition: 'Ready', from: 'True', to, reason: to === 'False' ? 'KubeletNotReady' : 'NodeStatusUnknown', message: to === 'False' ? 'kubelet /healthz returned 500' : 'Kubelet stopped posting node status.' });
      const up = down + 60_000 + Math.floor(rand() * 1_800_000);
      events.push({ time: up, node: name, kind: 'ConditionChanged', condition: 'Ready', from: to, to: 'True', reason: 'KubeletReady', message: 'kubelet /healthz endpoint returns ok' });
      at = up;
    }
    // Now: 3% NotReady, 2% Unknown.
    const roll = rand();
    if (roll < 0.05) {
      const to = roll < 0.03 ? 'False' : 'Unknown';
      const down = Math.max(at + 1000, now - Math.floor(rand() * DAY));
      events.push({ time: down, node: name, kind: 'ConditionChanged', condition: 'Ready', from: 'True', to, reason: to === 'False' ? 'KubeletNotReady' : 'NodeStatusUnknown', message: 'down for the benchmark' });
      status = to;
      at = down;
    }
    nodes.push({ record, status, since: at });
  }
  events.sort((a, b) => a.time - b.time);
  const lastVersion = new Map();
  const lines = [];
  events.forEach((e, i) => {
    e.seq = i + 1;
    lastVersion.set(e.node, e.seq);
    if (e.kind === 'Registered') e.record.resourceVersion = e.seq;
  });
  lines.push(JSON.stringify({ format: 'nodekeeper-export', version: 1, exportedAt: iso(now), lastSeq: events.length, nodes: nodes.length, events: events.length }));
  for (const { record, status, since } of nodes) {
    const last = lastVersion.get(record.name);
    const reason = status === 'True' ? 'KubeletReady' : status === 'False' ? 'KubeletNotReady' : 'NodeStatusUnknown';
    const node = { ...record, resourceVersion: last, conditions: [condition(status, since, reason, status === 'True' ? 'kubelet /healthz endpoint returns ok' : 'down for the benchmark')] };
    lines.push(JSON.stringify({ node }));
  }
  for (const e of events) {
    const { time, ...rest } = e;
    lines.push(JSON.stringify({ event: { ...rest, time: iso(time) } }));
  }
  writeFileSync(path, lines.join('\n') + '\n');
  return events.length;
}

function assetSizes() {
  const dir = join(dirname(fileURLToPath(import.meta.url)), '../../../console');
  let raw = 0;
  let gz = 0;
  for (const file of readdirSync(dir)) {
    const bytes = readFileSync(join(dir, file));
    raw += bytes.length;
    gz += gzipSync(bytes, { level: 9 }).length;
  }
  return { raw, gz, files: readdirSync(dir).length };
}

function serve(db) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, ['--db', db, 'ui', '--listen', LISTEN], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const url = out.match(/(http:\/\/\S+)\/ui\//);
      if (url) resolve({ child, url: url[1] });
    });
    child.on('exit', (code) => reject(new Error(`nodekeeper ui exited (${code})`)));
  });
}

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0], median: s[Math.floor(s.length / 2)], max: s[s.length - 1] };
};

const loadAtStart = loadavg().map((l) => l.toFixed(2)).join(' ');
const dir = STORE || mkdtempSync(join(tmpdir(), 'nodekeeper-render-bench-'));
let server = null;
let browser = null;
try {
  const exportFile = join(dir, 'site.jsonl');
  const db = join(dir, 'db');
  let events;
  if (STORE && existsSync(db)) {
    events = JSON.parse(readFileSync(exportFile, 'utf8').slice(0, 4096).split('\n')[0]).events;
  } else {
    mkdirSync(dir, { recursive: true });
    events = buildExport(exportFile);
    execFileSync(BIN, ['--db', db, 'db', 'import', '--input', exportFile], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  server = await serve(db);
  browser = await launch();
  const errors = [];
  const runs = [];
  for (let r = 0; r < RUNS; r++) {
    const page = await newPage(browser.context, errors);
    await page.goto(`${server.url}/ui/`);
    await page.waitForSelector('html[data-rendered="overview"]', { timeout: 60_000 });
    const t = await page.evaluate(() => {
      const at = (name) => performance.getEntriesByName(name)[0].startTime;
      const resources = performance.getEntriesByType('resource').map((r) => ({
        path: new URL(r.name).pathname,
        start: r.startTime,
        sent: r.requestStart,
        firstByte: r.responseStart,
        end: r.responseEnd,
        bytes: r.encodedBodySize,
        decoded: r.decodedBodySize,
      }));
      return { list: at('list-fetched'), built: at('overview-built'), painted: at('overview-painted'), tiles: document.querySelectorAll('[data-node]').length, resources };
    });
    if (t.tiles !== NODES) throw new Error(`${t.tiles} tiles, not ${NODES}`);
    runs.push(t);
    await page.close();
  }
  const strip = [];
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    const response = await fetch(`${server.url}/v1/readiness?buckets=1200`);
    await response.json();
    strip.push(performance.now() - t0);
  }
  const sizes = assetSizes();
  const fmt = (s) => `${s.median.toFixed(0)} ms (min ${s.min.toFixed(0)}, max ${s.max.toFixed(0)})`;
  const painted = stats(runs.map((t) => t.painted));
  const list = runs.map((t) => t.resources.find((r) => r.path === '/api/v1/nodes'));
  console.log(`console first render: ${NODES} nodes in ${ZONES} zones, ${events} events over 7 days, ${RUNS} loads of /ui/ from \`nodekeeper ui\` (${BIN})`);
  console.log(`  machine: ${cpus().length} cores, load average ${loadAtStart} at the start, ${loadavg().map((l) => l.toFixed(2)).join(' ')} at the end`);
  console.log(`  FIRST PAINT:         ${fmt(painted)} after navigation start (bar: median under 1,000 ms${painted.median < 1000 ? ', met' : ', NOT met'})`);
  console.log(`  node list fetched:   ${fmt(stats(runs.map((t) => t.list)))}`);
  console.log(`  tiles built:         ${fmt(stats(runs.map((t) => t.built)))}`);
  console.log(`  where the time goes (each a median over the loads):`);
  console.log(`    list requested at:       ${fmt(stats(list.map((r) => r.start)))} (the page's modules and its start)`);
  console.log(`    server (to first byte):  ${fmt(stats(list.map((r) => r.firstByte - r.sent)))}`);
  console.log(`    transfer:                ${fmt(stats(list.map((r) => r.end - r.firstByte)))}, ${(list[0].bytes / 2 ** 20).toFixed(1)} MiB on the wire, ${(list[0].decoded / 2 ** 20).toFixed(1)} MiB of JSON`);
  console.log(`    parse:                   ${fmt(stats(runs.map((t, i) => t.list - list[i].end)))}`);
  console.log(`    page work (list to tiles): ${fmt(stats(runs.map((t) => t.built - t.list)))}`);
  console.log(`    style, layout and paint: ${fmt(stats(runs.map((t) => t.painted - t.built)))}`);
  console.log(`    the first load, before the server kept any node's JSON: painted ${runs[0].painted.toFixed(0)} ms, server ${(list[0].firstByte - list[0].sent).toFixed(0)} ms`);
  // Would compression pay on loopback? What gzip costs the server for this list.
  const body = Buffer.from(await (await fetch(`${server.url}/api/v1/nodes`)).arrayBuffer());
  const z0 = performance.now();
  const zipped = gzipSync(body, { level: 1 });
  const zipMs = performance.now() - z0;
  console.log(`    gzip of the list (level 1, one core): ${zipMs.toFixed(0)} ms to ${(zipped.length / 2 ** 20).toFixed(1)} MiB, against a loopback transfer of ${stats(list.map((r) => r.end - r.firstByte)).median.toFixed(0)} ms`);
  const typical = [...runs].sort((a, b) => a.painted - b.painted)[Math.floor(runs.length / 2)];
  console.log(`  requests of the median load (start → end, ms after navigation start):`);
  for (const r of typical.resources) console.log(`    ${r.path.padEnd(28)} ${r.start.toFixed(0).padStart(5)} → ${r.end.toFixed(0).padStart(5)}`);
  console.log(`  site timeline (/v1/readiness over ${events} events): ${fmt(stats(strip))}`);
  console.log(`  assets: ${sizes.files} files, ${(sizes.raw / 1024).toFixed(1)} KiB, ${(sizes.gz / 1024).toFixed(1)} KiB gzipped`);
  if (errors.length) console.log(`  page errors: ${errors.join('; ')}`);
} finally {
  await browser?.close();
  server?.child.kill();
  if (!STORE) rmSync(dir, { recursive: true, force: true });
}
