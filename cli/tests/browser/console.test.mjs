// The console in a real browser, driven by tests/console.rs: it starts the
// binary and the fleet, runs `node console.test.mjs SCENARIO`, and answers
// the requests this script prints as `@@ REQUEST` lines (stop or start the
// controller) on its stdin. The script exits non-zero on the first failure.
//
// Environment: NK_URL (the server), NK_BIN (the nodekeeper binary), NK_DB
// (its store), NK_SIM (a fleet's control endpoint), NK_SHOTS (where to save
// screenshots), and per scenario a few more.

import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { launch, newPage, cli, getJSON, assert, assertEqual, tiles, readyPairs, pixelAt, cssColour, sameColour } from './lib.mjs';

const env = process.env;
const URL_BASE = env.NK_URL;
const WAIT = 30_000;

const stdinLines = createInterface({ input: process.stdin });
const answers = [];
const waiting = [];
stdinLines.on('line', (line) => (waiting.length ? waiting.shift()(line) : answers.push(line)));

/** Asks the Rust side to do something and waits for its answer. */
async function ask(request) {
  console.log(`@@ ${request}`);
  const line = answers.length ? answers.shift() : await new Promise((resolve) => waiting.push(resolve));
  return line.trim();
}

/** Drops the page errors a step caused on purpose (and only those). */
function forgive(errors, pattern) {
  const kept = errors.filter((e) => !pattern.test(e));
  errors.splice(0, errors.length, ...kept);
}

function step(text) {
  console.log(`-- ${text}`);
}

/** Pushes a node's Ready condition, as its kubelet would. */
async function pushReady(node, status) {
  const now = new Date().toISOString();
  const body = {
    status: {
      conditions: [
        { type: 'Ready', status, reason: status === 'True' ? 'KubeletReady' : 'KubeletNotReady', message: `pushed by the test: ${status}`, lastHeartbeatTime: now },
      ],
    },
  };
  const response = await fetch(`${URL_BASE}/api/v1/nodes/${node}/status`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/strategic-merge-patch+json' },
    body: JSON.stringify(body),
  });
  assert(response.ok, `push ${node} Ready=${status}: ${response.status} ${await response.text()}`);
}

async function setKubelet(control, node, state) {
  const response = await fetch(`${control}/nodes/${node}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ state }),
  });
  assert(response.ok, `sim set ${node} ${state}: ${response.status}`);
}

async function waitForOverview(page, path = '/ui/') {
  await page.goto(`${URL_BASE}${path}`);
  await page.waitForSelector(`html[data-rendered]`, { timeout: WAIT });
}

/** The names of the tiles shown (not hidden by a filter). */
async function shownTiles(page) {
  return page.$$eval('[data-node]', (els) =>
    els.filter((el) => el.checkVisibility()).map((el) => el.dataset.node).sort(),
  );
}

/** The pairs that differ between two sorted [name, ready] lists, for messages. */
function difference(a, b) {
  const left = new Map(a);
  const right = new Map(b);
  const names = [...new Set([...left.keys(), ...right.keys()])].filter((n) => left.get(n) !== right.get(n));
  return names.slice(0, 20).map((n) => `${n}: page ${left.get(n) ?? '-'}, API ${right.get(n) ?? '-'}`);
}

async function checkOverviewMatchesApi(page) {
  // A live fleet keeps changing: the page follows the API within moments,
  // so compare until both agree (or the deadline passes).
  const deadline = Date.now() + 90_000;
  let list;
  let shown;
  let counts;
  for (;;) {
    list = await getJSON(`${URL_BASE}/api/v1/nodes`);
    // Tiles and counts in one look, so no change lands between them.
    ({ shown, counts } = await page.evaluate(() => ({
      shown: [...document.querySelectorAll('[data-node]')]
        .map((el) => [el.dataset.node, el.dataset.ready])
        .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)),
      counts: Object.fromEntries(
        [...document.querySelectorAll('.summary .count')].map((el) => [el.dataset.status, Number(el.querySelector('b').textContent)]),
      ),
    })));
    if (JSON.stringify(shown) === JSON.stringify(readyPairs(list))) break;
    if (Date.now() > deadline) {
      throw new Error(`the tiles are not the nodes of /api/v1/nodes:\n  ${difference(shown, readyPairs(list)).join('\n  ')}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  // Grouped by zone.
  const zones = await page.$$eval('[data-node]', (els) =>
    Object.fromEntries(els.map((el) => [el.dataset.node, el.closest('[data-zone]').dataset.zone])),
  );
  for (const node of list.items) {
    const zone = node.metadata.labels['topology.kubernetes.io/zone'] ?? '(no zone)';
    assertEqual(zones[node.metadata.name], zone, `${node.metadata.name} is in its zone's group`);
  }
  // Counts by status.
  const want = { True: 0, False: 0, Unknown: 0 };
  for (const [, ready] of shown) want[ready] += 1;
  assertEqual(counts, want, 'the counts by Ready status');
  return list;
}

async function scenarioFleet() {
  const browser = await launch();
  const errors = [];
  try {
    const page = await newPage(browser.context, errors);
    const watches = [];
    page.on('request', (r) => {
      if (r.url().includes('watch=true')) watches.push(r.url());
    });

    step('the overview matches /api/v1/nodes');
    await waitForOverview(page);
    const list = await checkOverviewMatchesApi(page);
    assertEqual(await page.title(), `Overview · ${env.NK_SITE} · nodekeeper`, 'the title names the site (run --site)');
    await page.screenshot({ path: join(env.NK_SHOTS, 'console-overview.png'), fullPage: true });

    step('find by name, label selector and status filters');
    await page.fill('#find-name', '0001');
    assertEqual(await shownTiles(page), list.items.map((n) => n.metadata.name).filter((n) => n.includes('0001')).sort(), 'find by name');
    await page.fill('#find-name', '');
    for (const selector of ['tier=gold', 'tier in (gold,silver),topology.kubernetes.io/zone!=rack-a', '!tier', 'slot>10,slot<20', 'tier notin (gold)']) {
      await page.fill('#find-labels', selector);
      const server = await getJSON(`${URL_BASE}/api/v1/nodes?labelSelector=${encodeURIComponent(selector)}`);
      assertEqual(await shownTiles(page), server.items.map((n) => n.metadata.name).sort(), `the selector ${selector} selects what the API server's does`);
    }
    await page.fill('#find-labels', 'tier in (gold');
    const problem = await page.textContent('#selector-error');
    assert(problem.includes("expected: ',' or ')'") || problem.includes('found'), `a bad selector is explained: ${problem}`);
    await page.fill('#find-labels', '');
    await page.click('.summary .count[data-status="True"]');
    const shown = await shownTiles(page);
    assertEqual(shown, readyPairs(list).filter(([, r]) => r !== 'True').map(([n]) => n).sort(), 'hiding Ready leaves the others');
    assertEqual(await page.getAttribute('.summary .count[data-status="True"]', 'aria-pressed'), 'false', 'the filter button says it is off');
    await page.click('.summary .count[data-status="True"]');

    step('a node taken down changes its tile live');
    const victim = list.items[2].metadata.name;
    await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout: WAIT });
    await page.evaluate((name) => {
      const tile = document.querySelector(`[data-node="${name}"]`);
      new MutationObserver(() => {
        if (tile.dataset.ready === 'False' && !window.changedAt) window.changedAt = Date.now();
      }).observe(tile, { attributes: true });
    }, victim);
    await setKubelet(env.NK_SIM, victim, 'sick');
    await page.waitForSelector(`[data-node="${victim}"][data-ready="False"]`, { timeout: WAIT });
    const changedAt = await page.evaluate(() => window.changedAt);
    const events = JSON.parse(cli(env.NK_BIN, env.NK_DB, ['history', victim, '--condition', 'Ready', '-o', 'json']));
    const written = events.filter((e) => e.to === 'False').pop();
    assert(written, `history has ${victim} going False`);
    // Informational: the stamp is the controller's, the change the browser's; same clock.
    console.log(`live: ${victim} False written at ${written.time}, tile changed ${changedAt - Date.parse(written.time)} ms later`);
    await checkOverviewMatchesApi(page);

    step('a lost connection resumes from the last resourceVersion');
    assertEqual(await ask('stop-controller'), 'stopped', 'the controller stopped');
    await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'reconnecting', null, { timeout: WAIT });
    // The last version the page saw before the connection went.
    const before = await page.getAttribute('#conn', 'data-resource-version');
    const watchesBefore = watches.length;
    // Changed while nobody watched: the page must learn it on resuming.
    const missed = list.items[3].metadata.name;
    await setKubelet(env.NK_SIM, missed, 'sick');
    assertEqual(await ask('start-controller'), 'started', 'the controller started again');
    await page.waitForSelector(`[data-node="${missed}"][data-ready="False"]`, { timeout: WAIT });
    await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout: WAIT });
    const resumed = watches.slice(watchesBefore);
    assert(resumed.length > 0, 'the page watched again');
    for (const url of resumed) {
      assertEqual(new URL(url).searchParams.get('resourceVersion'), before, `the watch resumed from ${before}: ${url}`);
    }
    await checkOverviewMatchesApi(page);
    forgive(errors, /ERR_CONNECTION_REFUSED/);

    step("the node page's timeline matches history");
    const flapped = env.NK_FLAPPED;
    await page.goto(`${URL_BASE}/ui/nodes/${flapped}`);
    await page.waitForSelector('html[data-rendered="node"]', { timeout: WAIT });
    const history = JSON.parse(cli(env.NK_BIN, env.NK_DB, ['history', flapped, '-o', 'json']));
    const expected = [];
    const open = new Map();
    const close = (condition, time) => {
      if (open.has(condition)) open.get(condition).to = time;
      open.delete(condition);
    };
    for (const e of history) {
      if (e.kind === 'Registered') {
        for (const c of e.record.conditions) {
          close(c.type, e.time);
          const seg = { condition: c.type, status: c.status, from: e.time, to: '' };
          open.set(c.type, seg);
          expected.push(seg);
        }
      } else if (e.kind === 'ConditionChanged') {
        close(e.condition, e.time);
        const seg = { condition: e.condition, status: e.to, from: e.time, to: '' };
        open.set(e.condition, seg);
        expected.push(seg);
      } else if (e.kind === 'Deleted') {
        for (const c of [...open.keys()]) close(c, e.time);
      }
    }
    const key = (s) => `${s.condition} ${s.from} ${s.to} ${s.status}`;
    const segments = await page.$$eval('[data-condition][data-from]', (els) =>
      els.map((el) => ({ condition: el.dataset.condition, status: el.dataset.status, from: el.dataset.from, to: el.dataset.to })),
    );
    assertEqual(segments.map(key).sort(), expected.map(key).sort(), 'one segment per stretch of one status, as history has them');
    assert(segments.some((s) => s.status === 'False'), 'the outage is a segment');
    assertEqual(segments.filter((s) => s.to === '').length, new Set(segments.map((s) => s.condition)).size, 'one open segment per condition');
    for (const seg of segments) assert(!Number.isNaN(Date.parse(seg.from)) && (seg.to === '' || !Number.isNaN(Date.parse(seg.to))), 'RFC 3339 times');
    // The events carry their seq numbers.
    const seqs = await page.$$eval('#event-list [data-seq]', (rows) => rows.map((r) => Number(r.dataset.seq)));
    assertEqual(seqs, history.map((e) => e.seq).reverse(), 'every event, newest first, with its seq');
    // describe: the conditions and addresses of the node.
    const node = await getJSON(`${URL_BASE}/api/v1/nodes/${flapped}`);
    assertEqual(await page.$$eval('#conditions tbody tr', (rows) => rows.map((r) => [r.dataset.condition, r.dataset.status])), node.status.conditions.map((c) => [c.type, c.status]), 'the conditions table');
    const addresses = await page.textContent('#addresses');
    for (const a of node.status.addresses) assert(addresses.includes(a.address), `address ${a.address} shown`);
    assert((await page.textContent('#labels')).includes('topology.kubernetes.io/zone'), 'labels shown');
    // Hover, then keyboard focus: reason and message.
    const outage = page.locator('[data-condition="Ready"][data-status="False"]').first();
    await outage.hover();
    const tip = await page.textContent('#tip');
    const reason = history.find((e) => e.kind === 'ConditionChanged' && e.to === 'False');
    assert(tip.includes(reason.reason) && tip.includes(reason.message.slice(0, 30)), `the tooltip shows reason and message: ${tip}`);
    await page.mouse.move(0, 0);
    await page.focus('[data-condition="Ready"][tabindex="0"]');
    for (let i = 0; i < 10 && (await page.evaluate(() => document.activeElement.dataset.status)) !== 'False'; i++) await page.keyboard.press('ArrowRight');
    assertEqual(await page.evaluate(() => document.activeElement.dataset.status), 'False', 'arrow keys reach the outage');
    assert((await page.isVisible('#tip')) && (await page.textContent('#tip')).includes(reason.reason), 'focus shows the tooltip too');
    for (const zoom of ['hour', 'day', 'week', 'all']) {
      await page.click(`[data-zoom="${zoom}"]`);
      assertEqual(await page.getAttribute(`[data-zoom="${zoom}"]`, 'aria-pressed'), 'true', `zoom ${zoom}`);
      assert((await page.$$('[data-condition="Ready"][data-status="False"]')).length > 0, `the outage shows at zoom ${zoom}`);
    }
    await page.screenshot({ path: join(env.NK_SHOTS, 'console-node.png'), fullPage: true });

    step('the node page follows the node live');
    const watched = list.items[4].metadata.name;
    await page.goto(`${URL_BASE}/ui/nodes/${watched}`);
    await page.waitForSelector('html[data-rendered="node"]', { timeout: WAIT });
    await setKubelet(env.NK_SIM, watched, 'sick');
    await page.waitForSelector('#node-ready[data-ready="False"]', { timeout: WAIT });
    await page.waitForSelector('[data-condition="Ready"][data-status="False"][data-to=""]', { timeout: WAIT });

    step('the time-travel view at a past instant matches `nodekeeper at`');
    const sick = history.find((e) => e.kind === 'ConditionChanged' && e.to === 'False');
    const instant = sick.time;
    await page.goto(`${URL_BASE}/ui/at/${encodeURIComponent(instant)}`);
    await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
    const at = JSON.parse(cli(env.NK_BIN, env.NK_DB, ['at', instant, '-o', 'json']));
    assertEqual(await tiles(page), readyPairs(at), `the site at ${instant} is what \`nodekeeper at\` says`);
    assert(readyPairs(at).some(([n, r]) => n === flapped && r === 'False'), `${flapped} was NotReady then`);
    assertEqual(await page.getAttribute('.travel-note', 'data-resource-version'), at.metadata.resourceVersion, 'the same event');
    await page.waitForSelector('svg.strip path', { timeout: WAIT });
    await page.screenshot({ path: join(env.NK_SHOTS, 'console-at.png'), fullPage: true });

    step('clicking the strip travels there; entering a time does too');
    const box = await page.locator('svg.strip').boundingBox();
    await Promise.all([page.waitForURL(/\/ui\/at\//, { timeout: WAIT }), page.mouse.click(box.x + box.width * 0.5, box.y + box.height / 2)]);
    await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
    const picked = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
    const pickedAt = JSON.parse(cli(env.NK_BIN, env.NK_DB, ['at', picked, '-o', 'json']));
    assertEqual(await tiles(page), readyPairs(pickedAt), `the picked moment ${picked} matches \`nodekeeper at\``);
    await page.fill('#travel-time', instant);
    await Promise.all([page.waitForURL(/\/ui\/at\//), page.press('#travel-time', 'Enter')]);
    await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
    assertEqual(await tiles(page), readyPairs(at), 'an entered RFC 3339 time');
    await page.goto(`${URL_BASE}/ui/at/not-a-time`);
    await page.waitForSelector('.error', { timeout: WAIT });
    assert((await page.textContent('.error')).includes('RFC 3339'), 'a bad time is explained');
    forgive(errors, /status of 400/);

    step('keyboard, dark mode and phone width');
    await waitForOverview(page);
    await page.focus('.tiles .tile[tabindex="0"]');
    const first = await page.evaluate(() => document.activeElement.dataset.node);
    await page.keyboard.press('ArrowRight');
    const second = await page.evaluate(() => document.activeElement.dataset.node);
    assert(second && second !== first, 'arrow keys move between tiles');
    await Promise.all([page.waitForURL(new RegExp(`/ui/nodes/${second}$`)), page.keyboard.press('Enter')]);
    const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.emulateMedia({ colorScheme: 'light' });
    const light = await background();
    await page.emulateMedia({ colorScheme: 'dark' });
    assert((await background()) !== light, 'the dark preference changes the colours');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 375, height: 800 });
    for (const path of ['/ui/', `/ui/nodes/${flapped}`, `/ui/at/${encodeURIComponent(instant)}`]) {
      await page.goto(`${URL_BASE}${path}`);
      await page.waitForSelector('html[data-rendered]', { timeout: WAIT });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert(overflow <= 0, `${path} fits a phone's width (overflows by ${overflow}px)`);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  } finally {
    await browser.close();
  }
  assertEqual(errors, [], 'no errors in the page');
}

async function scenarioToken() {
  const browser = await launch();
  const errors = [];
  try {
    const page = await newPage(browser.context, errors);
    const sent = [];
    page.on('request', (r) => {
      if (r.url().includes('/api/v1/nodes')) sent.push(r.headers().authorization || '');
    });
    step('a refused token brings up the dialog');
    await page.goto(`${URL_BASE}/ui/`);
    await page.evaluate(() => sessionStorage.setItem('nodekeeper.token', 'wrong'));
    await page.reload();
    await page.waitForSelector('#token-dialog[open]', { timeout: WAIT });
    assert((await page.textContent('#token-why')).includes('refused'), 'the dialog says the token was refused');
    await page.fill('#token-input', env.NK_TOKEN);
    await page.click('#token-submit');
    await page.waitForSelector('html[data-rendered="overview"]', { timeout: WAIT });
    assertEqual(await page.evaluate(() => sessionStorage.getItem('nodekeeper.token')), env.NK_TOKEN, 'kept for the tab');
    assert(sent.includes(`Bearer ${env.NK_TOKEN}`), 'sent as a bearer token');
    const list = await getJSON(`${URL_BASE}/api/v1/nodes`, env.NK_TOKEN);
    assertEqual(await tiles(page), readyPairs(list), 'the overview, with the token');
    step('another tab does not have it');
    const other = await browser.context.newPage();
    await other.goto(`${URL_BASE}/ui/`);
    assertEqual(await other.evaluate(() => sessionStorage.getItem('nodekeeper.token')), null, 'sessionStorage is per tab');
    await other.close();
  } finally {
    await browser.close();
  }
  assertEqual(errors.filter((e) => !e.includes('401')), [], 'no errors in the page but the expected 401');
}

async function scenarioStopped() {
  const browser = await launch();
  const errors = [];
  try {
    const page = await newPage(browser.context, errors);
    step('`nodekeeper ui` shows the stopped store');
    await waitForOverview(page);
    // `ui` holds the store, so the CLI cannot read it now; the test compared
    // this API with `nodekeeper nodes` before starting it.
    const stored = await getJSON(`${URL_BASE}/api/v1/nodes`);
    assertEqual(await tiles(page), readyPairs(stored), 'the tiles are the stored nodes');
    assertEqual(await page.getAttribute('#conn', 'data-state'), 'stopped', 'says it is a stopped store');
    await page.waitForSelector('#mirror-health dl', { timeout: WAIT });

    step('the time since the controller stopped is grey on the strip, over the status');
    const readiness = await getJSON(`${URL_BASE}/v1/readiness?buckets=100`);
    const open = readiness.gaps.at(-1);
    assert(open && open.to === null, `/v1/readiness has the open gap of the stopped controller: ${JSON.stringify(readiness.gaps)}`);
    await page.waitForSelector('svg.strip path', { timeout: WAIT });
    const strip = await page.locator('svg.strip').boundingBox();
    const gaps = await page.$$eval('svg.strip rect.gap', (els) => els.map((el) => el.getBoundingClientRect().toJSON()));
    assert(gaps.length > 0, 'the strip draws the gap');
    const gap = gaps.at(-1);
    assert(Math.abs(gap.right - (strip.x + strip.width)) <= 2, `the open gap reaches the end of the strip: gap ${JSON.stringify(gap)}, strip ${JSON.stringify(strip)}`);
    assert(gap.width >= 4, `the gap is wide enough to see: ${gap.width}px`);
    await page.mouse.move(0, 0);
    const grey = await cssColour(page, 'var(--gap)');
    const middle = gap.left + gap.width / 2;
    // The bottom is where the Ready area is drawn: the gap must cover it.
    for (const [where, y] of [['bottom', strip.y + strip.height - 3], ['middle', strip.y + strip.height / 2], ['top', strip.y + 3]]) {
      const seen = await pixelAt(page, middle, y);
      assert(sameColour(seen, grey), `the gap is grey at its ${where}: rgb(${seen}), not the gap's rgb(${grey})`);
    }
    await page.mouse.move(middle, strip.y + strip.height / 2);
    const tip = await page.textContent('#tip');
    assert(/no controller/i.test(tip) && tip.includes('still stopped'), `hovering the gap says no controller ran: ${tip}`);
    await page.screenshot({ path: join(env.NK_SHOTS, 'console-stopped.png') });
    await page.mouse.move(0, 0);
    const name = stored.items[0].metadata.name;
    await page.goto(`${URL_BASE}/ui/nodes/${name}`);
    await page.waitForSelector('html[data-rendered="node"]', { timeout: WAIT });
    const history = await getJSON(`${URL_BASE}/v1/history?node=${name}`);
    const seqs = await page.$$eval('#event-list [data-seq]', (rows) => rows.map((r) => Number(r.dataset.seq)));
    assertEqual(seqs, history.map((e) => e.seq).reverse(), 'its events');
    assert((await page.$$('[data-condition="Ready"][data-from]')).length > 0, 'its timeline');
  } finally {
    await browser.close();
  }
  assertEqual(errors, [], 'no errors in the page');
}

async function scenarioScale() {
  const total = Number(env.NK_NODES);
  const browser = await launch();
  const errors = [];
  try {
    const page = await newPage(browser.context, errors);
    step(`the overview of ${total} nodes`);
    await waitForOverview(page);
    const timing = await page.evaluate(() => {
      const at = (name) => performance.getEntriesByName(name)[0]?.startTime;
      return { list: at('list-fetched'), built: at('overview-built'), painted: at('overview-painted') };
    });
    console.log(`first render: list fetched ${timing.list.toFixed(0)} ms, tiles built ${timing.built.toFixed(0)} ms, painted ${timing.painted.toFixed(0)} ms after navigation (debug build server)`);
    assertEqual((await page.$$('[data-node]')).length, total, 'every node has a tile');
    await checkOverviewMatchesApi(page);

    step('the page stays responsive');
    // Longest main-thread task from here on.
    await page.evaluate(() => {
      window.longest = 0;
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) window.longest = Math.max(window.longest, e.duration);
      }).observe({ type: 'longtask' });
    });
    const t0 = Date.now();
    await page.fill('#find-name', 'edge-0421');
    await page.waitForFunction(() => document.getElementById('shown').dataset.shown === '10', null, { timeout: WAIT });
    const findMs = Date.now() - t0;
    assertEqual((await shownTiles(page)).length, 10, 'find by name among 10,000');
    await page.fill('#find-name', '');
    const t1 = Date.now();
    await page.fill('#find-labels', 'topology.kubernetes.io/zone in (zone-1,zone-2)');
    const server = await getJSON(`${URL_BASE}/api/v1/nodes?labelSelector=${encodeURIComponent('topology.kubernetes.io/zone in (zone-1,zone-2)')}`);
    await page.waitForFunction((n) => document.getElementById('shown').dataset.shown === String(n), server.items.length, { timeout: WAIT });
    const selectMs = Date.now() - t1;
    await page.fill('#find-labels', '');
    // Nodes report while the page is open: their tiles change.
    const up = ['edge-00000', 'edge-05000', 'edge-09999'];
    const down = ['edge-00017', 'edge-04999'];
    const t2 = Date.now();
    for (const name of up) await pushReady(name, 'True');
    for (const name of down) await pushReady(name, 'False');
    for (const name of up) await page.waitForSelector(`[data-node="${name}"][data-ready="True"]`, { timeout: WAIT });
    for (const name of down) await page.waitForSelector(`[data-node="${name}"][data-ready="False"]`, { timeout: WAIT });
    const liveMs = Date.now() - t2;
    await checkOverviewMatchesApi(page);
    const t3 = Date.now();
    // Hide Unknown and Ready: the NotReady ones are left.
    await page.click('.summary .count[data-status="Unknown"]');
    await page.click('.summary .count[data-status="True"]');
    await page.waitForFunction(() => document.getElementById('shown').dataset.shown === '2', null, { timeout: WAIT });
    const statusMs = Date.now() - t3;
    assertEqual((await shownTiles(page)).sort(), down.sort(), 'only the NotReady nodes are left');
    const longest = await page.evaluate(() => window.longest || 0);
    const updates = await page.evaluate(() => performance.getEntriesByName('overview-update').map((e) => e.duration).sort((a, b) => a - b));
    const t4 = Date.now();
    await Promise.all([page.waitForURL(/\/ui\/nodes\/edge-00017$/), page.click('[data-node="edge-00017"]')]);
    await page.waitForSelector('html[data-rendered="node"]', { timeout: WAIT });
    const openMs = Date.now() - t4;
    console.log(
      `responsive at ${total}: find by name ${findMs} ms, label selector ${selectMs} ms, status filter ${statusMs} ms, ` +
        `five pushed statuses on screen ${liveMs} ms after the first was sent, node page ${openMs} ms`,
    );
    console.log(`longest main-thread task while finding, filtering and following the pushes: ${Math.round(longest)} ms`);
    assert(updates.length > 0, 'the page timed its updates');
    console.log(`the page's work per live update: median ${updates[Math.floor(updates.length / 2)].toFixed(1)} ms, longest ${updates.at(-1).toFixed(1)} ms, over ${updates.length} updates`);
    await page.waitForSelector('#timeline-title', { timeout: WAIT });
    await waitForOverview(page);
    await checkOverviewMatchesApi(page);
  } finally {
    await browser.close();
  }
  assertEqual(errors, [], 'no errors in the page');
}

/** A Kubernetes node's Ready condition, or null. */
function readyCondition(node) {
  return (node.status?.conditions || []).find((c) => c.type === 'Ready') || null;
}

/** A time as the console shows it: UTC, to the second. */
function shownTime(time) {
  return new Date(Date.parse(time)).toISOString().slice(0, 19).replace('T', ' ') + 'Z';
}

/** Pushes a node's Ready condition with a reason and a message. */
async function pushStatus(node, status, reason, message) {
  const body = { status: { conditions: [{ type: 'Ready', status, reason, message, lastHeartbeatTime: new Date().toISOString() }] } };
  const response = await fetch(`${URL_BASE}/api/v1/nodes/${node}/status`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/strategic-merge-patch+json' },
    body: JSON.stringify(body),
  });
  assert(response.ok, `push ${node} Ready=${status}: ${response.status} ${await response.text()}`);
}

/** Waits until `check` holds for the node list, and returns it. */
async function waitForList(what, check) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const list = await getJSON(`${URL_BASE}/api/v1/nodes`);
    if (check(list)) return list;
    assert(Date.now() < deadline, `never: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** The nodes not Ready in a NodeList as the problems list must show them: longest first. */
function expectedProblems(list) {
  return list.items
    .map((n) => ({ n, c: readyCondition(n) }))
    .filter(({ c }) => !c || c.status !== 'True')
    .map(({ n, c }) => ({ name: n.metadata.name, status: c?.status ?? 'Unknown', reason: c?.reason ?? '', since: c?.lastTransitionTime ?? n.metadata.creationTimestamp }))
    .sort((a, b) => Date.parse(a.since) - Date.parse(b.since) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

async function shownProblems(page) {
  return page.$$eval('#problems [data-problem]', (rows) =>
    rows.map((r) => ({ name: r.dataset.problem, status: r.dataset.ready, since: r.dataset.since, text: r.textContent })),
  );
}

async function scenarioProblems() {
  const total = Number(env.NK_NODES);
  const names = Array.from({ length: total }, (_, i) => `site-${String(i).padStart(4, '0')}`);
  const silent = ['site-0007', 'site-0999', 'site-1000', 'site-1999'];
  step(`${total - silent.length} of ${total} nodes push Ready; ${silent.join(', ')} are never heard from`);
  const pushing = names.filter((n) => !silent.includes(n));
  for (let i = 0; i < pushing.length; i += 16) {
    await Promise.all(pushing.slice(i, i + 16).map((n) => pushStatus(n, 'True', 'KubeletReady', 'kubelet is posting ready status')));
  }
  await waitForList('every pushed node is Ready', (list) => list.items.filter((n) => readyCondition(n)?.status === 'True').length === pushing.length);
  // The moment time travel goes back to: everything above is in the history by now.
  const moment = new Date().toISOString();

  step('after that moment, six break and one of the silent ones reports');
  const broken = [
    ['site-0042', 'False', 'KubeletNotReady', 'container runtime is down'],
    ['site-0421', 'False', 'DiskFull', '/var is full'],
    ['site-1234', 'Unknown', 'NodeStatusUnknown', 'Kubelet stopped posting node status.'],
    ['site-1500', 'False', 'KubeletNotReady', 'PLEG is not healthy'],
    ['site-1777', 'False', 'NetworkUnavailable', 'no route to the API server'],
    ['site-1888', 'Unknown', 'NodeStatusUnknown', 'Kubelet stopped posting node status.'],
  ];
  for (const [name, status, reason, message] of broken) await pushStatus(name, status, reason, message);
  await pushStatus('site-1000', 'True', 'KubeletReady', 'kubelet is posting ready status');
  const list = await waitForList('the broken nodes are broken', (l) => expectedProblems(l).length === 9);

  const browser = await launch();
  const errors = [];
  // Each part goes to its own page: one that fails does not hide the others.
  const failures = [];
  const part = async (name, run) => {
    step(name);
    try {
      await run();
    } catch (error) {
      console.log(`FAILED part: ${error.message}`);
      failures.push(name);
    }
  };
  try {
    const page = await newPage(browser.context, errors);
    await part('the problems list comes first and is every node not Ready, longest first', async () => {
      await waitForOverview(page);
      await page.waitForSelector('#problems [data-problem]', { timeout: WAIT });
      assertEqual(await page.evaluate(() => document.querySelector('main').firstElementChild.id), 'problems', 'the problems list is first on the page');
      const want = expectedProblems(list);
      const shown = await shownProblems(page);
      assertEqual(shown.map((p) => [p.name, p.status, p.since]), want.map((p) => [p.name, p.status, p.since]), 'the problems list is the nodes of /api/v1/nodes not Ready, longest first');
      for (const [i, p] of want.entries()) {
        const text = shown[i].text;
        assert(text.includes(p.reason) && text.includes(shownTime(p.since)) && /\d+(ms|s|m|h|d)\b/.test(text), `${p.name}'s row has its reason, since when and for how long: ${text}`);
        assert(text.includes(p.status === 'False' ? 'NotReady' : 'Unknown'), `${p.name}'s row has its condition: ${text}`);
      }
      await page.screenshot({ path: join(env.NK_SHOTS, 'console-problems.png') });
    });
    await part('the problems list follows the site live', async () => {
      await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout: WAIT });
      await pushStatus('site-0500', 'False', 'KubeletNotReady', 'pushed by the test');
      try {
        await page.waitForSelector('#problems [data-problem="site-0500"]', { timeout: WAIT });
      } finally {
        await pushStatus('site-0500', 'True', 'KubeletReady', 'kubelet is posting ready status');
      }
      await page.waitForSelector('#problems [data-problem="site-0500"]', { state: 'detached', timeout: WAIT });
      const now = await getJSON(`${URL_BASE}/api/v1/nodes`);
      assertEqual((await shownProblems(page)).map((p) => p.name), expectedProblems(now).map((p) => p.name), 'the list after the change');
    });
    await part('hovering or focusing a tile shows its card', async () => {
      await waitForOverview(page);
      const now = await getJSON(`${URL_BASE}/api/v1/nodes`);
      for (const name of ['site-0421', 'site-1234', 'site-0100']) {
        const node = now.items.find((n) => n.metadata.name === name);
        const c = readyCondition(node);
        await page.hover(`[data-node="${name}"]`);
        await page.waitForSelector('#tip:not([hidden])', { timeout: WAIT });
        const tip = await page.textContent('#tip');
        const word = c.status === 'True' ? 'Ready' : c.status === 'False' ? 'NotReady' : 'Unknown';
        assert(tip.startsWith(name) && tip.includes(word) && tip.includes(c.reason) && tip.includes(shownTime(c.lastTransitionTime)), `the card of ${name} says its name, ${word}, ${c.reason} and since ${shownTime(c.lastTransitionTime)}: ${tip}`);
      }
      await page.mouse.move(0, 0);
      await page.focus('.tiles .tile[tabindex="0"]');
      const focused = await page.evaluate(() => document.activeElement.dataset.node);
      assert((await page.textContent('#tip')).startsWith(focused), 'focus shows the card too');
    });
    await part('a link with filters shows what its sender saw; the back button works', async () => {
      const link = `/ui/?name=site-1&labels=${encodeURIComponent('tier=gold')}&hide=True`;
      const gold = await getJSON(`${URL_BASE}/api/v1/nodes?labelSelector=tier%3Dgold`);
      const filtered = (hide) =>
        gold.items
          .filter((n) => n.metadata.name.includes('site-1') && !hide.includes(readyCondition(n)?.status ?? 'Unknown'))
          .map((n) => n.metadata.name)
          .sort();
      const checkFilters = async (name, hide, what) => {
        assertEqual(await page.inputValue('#find-name'), name, `${what}: the name filter`);
        assertEqual(await page.inputValue('#find-labels'), 'tier=gold', `${what}: the label selector`);
        const pressed = await page.$$eval('.summary .count', (els) => els.map((el) => [el.dataset.status, el.getAttribute('aria-pressed')]));
        assertEqual(pressed, ['True', 'False', 'Unknown'].map((s) => [s, String(!hide.includes(s))]), `${what}: the status buttons`);
        const nameFiltered = filtered(hide).filter((n) => n.includes(name));
        assertEqual(await shownTiles(page), nameFiltered, `${what}: the tiles shown`);
      };
      await waitForOverview(page, link);
      await checkFilters('site-1', ['True'], 'the link');
      assert(filtered(['True']).length >= 2, `the link shows a few nodes: ${filtered(['True'])}`);
      await page.click('.summary .count[data-status="Unknown"]');
      await page.waitForFunction(() => new URLSearchParams(location.search).get('hide')?.includes('Unknown'), null, { timeout: WAIT });
      await checkFilters('site-1', ['True', 'Unknown'], 'Unknown hidden too');
      await page.goBack();
      await page.waitForFunction(() => document.querySelector('.summary .count[data-status="Unknown"]').getAttribute('aria-pressed') === 'true', null, { timeout: WAIT });
      assertEqual(new URL(page.url()).search, new URL(`${URL_BASE}${link}`).search, 'back: the link again');
      await checkFilters('site-1', ['True'], 'back');
      await page.fill('#find-name', 'site-15');
      await page.waitForFunction(() => new URLSearchParams(location.search).get('name') === 'site-15', null, { timeout: WAIT });
      await checkFilters('site-15', ['True'], 'a name typed');
      await page.goBack();
      await page.waitForFunction(() => document.getElementById('find-name').value === 'site-1', null, { timeout: WAIT });
      await checkFilters('site-1', ['True'], 'back from typing');
      const opened = filtered(['True'])[0];
      await Promise.all([page.waitForURL(new RegExp(`/ui/nodes/${opened}$`)), page.click(`[data-node="${opened}"]`)]);
      await page.waitForSelector('html[data-rendered="node"]', { timeout: WAIT });
      await page.goBack();
      await page.waitForSelector('html[data-rendered="overview"]', { timeout: WAIT });
      await checkFilters('site-1', ['True'], 'back from a node page');
      const then = await getJSON(`${URL_BASE}/v1/at?time=${encodeURIComponent(moment)}`);
      await page.goto(`${URL_BASE}/ui/at/${encodeURIComponent(moment)}?hide=True`);
      await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
      assertEqual(await shownTiles(page), readyPairs(then).filter(([, r]) => r !== 'True').map(([n]) => n).sort(), 'a time-travel link keeps its filters');
    });
    await part('time travel compares the moment with now', async () => {
      const then = await getJSON(`${URL_BASE}/v1/at?time=${encodeURIComponent(moment)}`);
      const now = await getJSON(`${URL_BASE}/api/v1/nodes`);
      await page.goto(`${URL_BASE}/ui/at/${encodeURIComponent(moment)}`);
      await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
      await page.waitForSelector('#changes[data-state="done"]', { timeout: WAIT });
      assertEqual((await shownProblems(page)).map((p) => p.name), expectedProblems(then).map((p) => p.name), 'the problems list of the moment');
      const before = new Map(readyPairs(then));
      const after = new Map(readyPairs(now));
      const changed = [...new Set([...before.keys(), ...after.keys()])]
        .filter((n) => before.get(n) !== after.get(n))
        .sort()
        .map((n) => [n, before.get(n) ?? '', after.get(n) ?? '']);
      const rows = await page.$$eval('#changes [data-changed]', (els) => els.map((el) => [el.dataset.changed, el.dataset.then, el.dataset.now]));
      assertEqual(rows, changed, 'the nodes whose Ready status changed between the moment and now');
      assertEqual(changed.length, broken.length + 1, 'six broke and one came');
      await page.screenshot({ path: join(env.NK_SHOTS, 'console-changes.png') });
    });
    await part('an age is resolved to the time it means', async () => {
      const asked = Date.now();
      await page.goto(`${URL_BASE}/ui/at/2s`);
      await page.waitForSelector('html[data-rendered="at"]', { timeout: WAIT });
      const answered = Date.now();
      const resolved = await page.getAttribute('#at-time', 'data-time');
      const at = Date.parse(resolved);
      assert(at >= asked - 2000 - 1000 && at <= answered - 2000 + 1000, `"2s" means two seconds before the page asked: ${resolved}, asked at ${new Date(asked).toISOString()}`);
      assert((await page.textContent('#at-time')).includes(shownTime(resolved)), 'the resolved time is shown');
      assert((await page.textContent('.travel-note')).includes('2s'), 'with the age it was given as');
      assertEqual(decodeURIComponent(new URL(page.url()).pathname), `/ui/at/${resolved}`, 'the link now names the time, so it shows the same moment later');
      const resolvedAt = await getJSON(`${URL_BASE}/v1/at?time=${encodeURIComponent(resolved)}`);
      assertEqual(await tiles(page), readyPairs(resolvedAt), 'the site at that time');
    });
    await part('an outage past 100 nodes is counted, its 100 longest drawn, and all on asking', async () => {
      await waitForOverview(page);
      await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout: WAIT });
      const before = expectedProblems(await getJSON(`${URL_BASE}/api/v1/nodes`)).length;
      const outage = names.slice(100, 220);
      for (let i = 0; i < outage.length; i += 16) {
        await Promise.all(outage.slice(i, i + 16).map((n) => pushStatus(n, 'False', 'KubeletNotReady', 'part of an outage')));
      }
      const total = before + outage.length;
      const list = await waitForList(`${total} nodes not Ready`, (l) => expectedProblems(l).length === total);
      await page.waitForSelector(`#problems[data-count="${total}"]`, { timeout: WAIT });
      const want = expectedProblems(list).map((p) => [p.name, p.status, p.since]);
      const rows = async () => (await shownProblems(page)).map((p) => [p.name, p.status, p.since]);
      assertEqual(await rows(), want.slice(0, 100), 'the 100 longest, in order');
      assert((await page.textContent('#problems .problems-summary')).startsWith(`${total} of ${list.items.length} nodes not Ready`), 'the summary counts them all');
      assertEqual(await page.textContent('#problems button.more'), `Show all ${total}`, 'the button says how many there are');
      await page.click('#problems button.more');
      await page.waitForFunction((n) => document.querySelectorAll('#problems [data-problem]').length === n, total, { timeout: WAIT });
      assertEqual(await rows(), want, 'all of them, in order');
      assert(await page.isHidden('#problems button.more'), 'nothing more to show');
    });
  } finally {
    await browser.close();
  }
  assertEqual(failures, [], 'every part passed');
  assertEqual(errors, [], 'no errors in the page');
}
const scenarios = { fleet: scenarioFleet, token: scenarioToken, stopped: scenarioStopped, scale: scenarioScale, problems: scenarioProblems };
const scenario = scenarios[process.argv[2]];
if (!scenario) {
  console.error(`usage: node console.test.mjs ${Object.keys(scenarios).join('|')}`);
  process.exit(2);
}
try {
  await scenario();
  console.log(`ok: ${process.argv[2]}`);
  process.exit(0);
} catch (error) {
  console.log(`FAILED: ${error.stack || error}`);
  process.exit(1);
}
