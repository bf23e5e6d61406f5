// The console's entry point: reads what it is looking at (a running
// controller, or a stopped store through `nodekeeper ui`), routes on the
// path, and wires the pages to the API.
//
//   /ui/                the site overview, live
//   /ui/nodes/{name}    one node: describe, condition timeline, events
//   /ui/at/{time}       the site as it was at {time} (RFC 3339, or an age such as 2h)

import { h, rfc3339, showTime, debounce } from './dom.js';
import { getJSON, NodeWatch, token, setToken, askForToken, ApiError } from './api.js';
import { Overview } from './overview.js';
import { SiteStrip } from './strip.js';
import { Health } from './health.js';
import { NodePage } from './node.js';

const main = document.getElementById('main');
const conn = document.getElementById('conn');

/** The strip is recomputed from the whole history: at most this often. */
const STRIP_REFRESH_MS = 10_000;

function showConnection(state, resourceVersion, detail) {
  conn.dataset.state = state;
  if (resourceVersion !== undefined) conn.dataset.resourceVersion = String(resourceVersion);
  const words = {
    live: 'Live',
    reconnecting: 'Connection lost, resuming…',
    connecting: 'Connecting…',
    stopped: 'Stopped store, read-only',
    past: 'The past, not live',
  };
  conn.textContent = words[state] || state;
  conn.title = detail || (resourceVersion ? `resourceVersion ${resourceVersion}` : '');
}

function travelTo(time) {
  location.assign(`/ui/at/${encodeURIComponent(typeof time === 'number' ? rfc3339(time) : time)}`);
}

function showError(error) {
  const message = error instanceof ApiError ? error.message : String(error?.message || error);
  main.replaceChildren(h('h2', {}, 'Something went wrong'), h('p', { class: 'error', role: 'alert' }, message), h('p', {}, h('a', { href: '/ui/' }, 'Back to the overview')));
}

/**
 * Marks the moment a page's nodes are on screen, for the benchmark and
 * tests; resolves once they are painted.
 */
function markRendered(name) {
  performance.mark(`${name}-built`);
  return new Promise((resolve) =>
    requestAnimationFrame(() =>
      setTimeout(() => {
        performance.mark(`${name}-painted`);
        document.documentElement.dataset.rendered = name;
        resolve();
      }, 0),
    ),
  );
}

// The tab's title: the page, then the site (`run --site`) when it has a name.
let siteName = null;
function setTitle(page) {
  document.title = [page, siteName, 'nodekeeper'].filter(Boolean).join(' · ');
}

async function overviewPage(about, nodes) {
  setTitle('Overview');
  const stripEl = h('section', { class: 'strip-box', 'aria-label': 'Site timeline' });
  const healthEl = h('div', { class: 'health' });
  const overviewEl = h('section', { class: 'overview', 'aria-labelledby': 'overview-title' });
  main.replaceChildren(stripEl, healthEl, overviewEl);
  const strip = new SiteStrip(stripEl, { onPick: travelTo });
  const health = new Health(healthEl);
  const overview = new Overview(overviewEl, { caption: about.readOnly ? 'Nodes (stopped store)' : 'Nodes' });

  const list = await nodes;
  performance.mark('list-fetched');
  overview.setNodes(list.items);
  // The tiles first: the site timeline and the health panels come after.
  await markRendered('overview');
  strip.load().catch((e) => (stripEl.textContent = `Site timeline: ${e.message}`));
  health.refresh();
  if (about.readOnly) {
    showConnection('stopped', list.metadata.resourceVersion);
    return;
  }
  let stripLoaded = Date.now();
  const refreshStrip = debounce(() => {
    stripLoaded = Date.now();
    strip.load().catch(() => {});
  }, 500);
  const refreshHealth = debounce(() => health.refresh(), 500);
  const follow = (resourceVersion) =>
    new NodeWatch({
      resourceVersion,
      onEvents: (batch, version) => {
        conn.dataset.resourceVersion = version;
        overview.apply(batch);
        // Bookmarks (empty batches) and changes both refresh the health panels.
        refreshHealth();
        if (batch.length && Date.now() - stripLoaded > STRIP_REFRESH_MS) refreshStrip();
      },
      onState: showConnection,
      onExpired: async () => {
        // The version is no longer kept: list again and follow from there.
        const fresh = await getJSON('/api/v1/nodes');
        overview.setNodes(fresh.items);
        follow(fresh.metadata.resourceVersion);
      },
    });
  showConnection('connecting', list.metadata.resourceVersion);
  follow(list.metadata.resourceVersion);
}

async function atPage(text) {
  setTitle(`The site at ${text}`);
  document.getElementById('travel-time').value = text;
  const stripEl = h('section', { class: 'strip-box', 'aria-label': 'Site timeline' });
  const overviewEl = h('section', { class: 'overview', 'aria-labelledby': 'overview-title' });
  const heading = h('div', { class: 'travel-note' });
  main.replaceChildren(heading, stripEl, overviewEl);
  showConnection('past');
  const list = await getJSON(`/v1/at?time=${encodeURIComponent(text)}`);
  const parsed = Date.parse(text);
  const strip = new SiteStrip(stripEl, { marker: Number.isNaN(parsed) ? null : parsed, onPick: travelTo });
  heading.replaceChildren(
    h('p', {}, 'The registry rebuilt from its history as it was at ', h('strong', { id: 'at-time' }, Number.isNaN(parsed) ? text : showTime(parsed)), ` (after event ${list.metadata.resourceVersion}): what `, h('code', {}, `nodekeeper at ${text}`), ' shows. ', h('a', { href: '/ui/' }, 'Back to now')),
  );
  heading.dataset.resourceVersion = list.metadata.resourceVersion;
  const overview = new Overview(overviewEl, { caption: 'Nodes then' });
  overview.setNodes(list.items);
  await markRendered('at');
  strip.load().catch((e) => (stripEl.textContent = `Site timeline: ${e.message}`));
}

async function nodePage(name, about) {
  setTitle(name);
  showConnection(about.readOnly ? 'stopped' : 'live');
  const page = new NodePage(main, name, { live: !about.readOnly });
  await page.load();
  markRendered('node');
}

function setupHeader() {
  document.getElementById('travel').addEventListener('submit', (event) => {
    event.preventDefault();
    const value = document.getElementById('travel-time').value.trim();
    if (value) travelTo(value);
  });
  const button = document.getElementById('token-button');
  const label = () => (button.textContent = token() ? 'Token set' : 'Token');
  label();
  button.addEventListener('click', async () => {
    await askForToken('Enter a token from the server\'s --token-file. It is kept for this tab only; an empty one forgets it.');
    label();
    location.reload();
  });
  document.getElementById('token-clear').addEventListener('click', () => {
    setToken('');
    document.getElementById('token-dialog').close();
    location.reload();
  });
}

async function start() {
  setupHeader();
  const path = location.pathname;
  const node = path.match(/^\/ui\/nodes\/([^/]+)$/);
  const at = path.match(/^\/ui\/at\/([^/]+)$/);
  // The overview's node list is the long read: it starts now, alongside
  // the question of what is being looked at.
  const nodes = node || at ? null : getJSON('/api/v1/nodes');
  nodes?.catch(() => {});
  let about = { mode: 'controller', readOnly: false };
  try {
    about = await getJSON('/v1/console');
  } catch (error) {
    if (error instanceof ApiError && error.status !== 404) throw error;
  }
  document.documentElement.dataset.mode = about.mode;
  siteName = about.site || null;
  if (node) return nodePage(decodeURIComponent(node[1]), about);
  if (at) return atPage(decodeURIComponent(at[1]));
  return overviewPage(about, nodes);
}

start().catch(showError);
