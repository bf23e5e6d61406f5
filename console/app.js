// The console's entry point: reads what it is looking at (a running
// controller, or a stopped store through `nodekeeper ui`), routes on the
// path, and wires the pages to the API.
//
//   /ui/                the site overview, live
//   /ui/nodes/{name}    one node: describe, condition timeline, events
//   /ui/at/{time}       the site as it was at {time} (RFC 3339, or an age such as 2h)
//
// The overview's filters are kept in the query of the first and the last
// (see link.js).

import { h, rfc3339, showTime, debounce } from './dom.js';
import { getJSON, getJSONAndHeaders, NodeWatch, token, setToken, askForToken, ApiError } from './api.js';
import { Overview } from './overview.js';
import { Problems } from './problems.js';
import { Changes } from './changes.js';
import { SiteStrip } from './strip.js';
import { Health } from './health.js';
import { NodePage } from './node.js';
import { filtersOf, keepInURL } from './link.js';

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

/** Opens the site at `time`, with the filters the page has. */
function travelTo(time) {
  location.assign(`/ui/at/${encodeURIComponent(typeof time === 'number' ? rfc3339(time) : time)}${location.search}`);
}

/** An overview whose filters come from the URL and go back into it. */
function filteredOverview(el, options) {
  const overview = new Overview(el, { ...options, onFilters: keepInURL });
  overview.setFilters(filtersOf(location.search));
  // The back and forward buttons within the page: its filters as they were.
  const path = location.pathname;
  window.addEventListener('popstate', () => {
    if (location.pathname === path) overview.setFilters(filtersOf(location.search));
    else location.reload();
  });
  return overview;
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
  const problemsEl = h('section');
  const stripEl = h('section', { class: 'strip-box', 'aria-label': 'Site timeline' });
  const healthEl = h('div', { class: 'health' });
  const overviewEl = h('section', { class: 'overview', 'aria-labelledby': 'overview-title' });
  main.replaceChildren(problemsEl, stripEl, healthEl, overviewEl);
  const problems = new Problems(problemsEl, { title: about.readOnly ? 'Not Ready, as the store last recorded' : 'Not Ready', live: !about.readOnly });
  const strip = new SiteStrip(stripEl, { onPick: travelTo });
  const health = new Health(healthEl);
  const overview = filteredOverview(overviewEl, {
    caption: about.readOnly ? 'Nodes (stopped store)' : 'Nodes',
    onNodes: (records) => problems.set(records),
  });

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
  const heading = h('div', { class: 'travel-note' });
  const problemsEl = h('section');
  const changesEl = h('section');
  const stripEl = h('section', { class: 'strip-box', 'aria-label': 'Site timeline' });
  const overviewEl = h('section', { class: 'overview', 'aria-labelledby': 'overview-title' });
  main.replaceChildren(heading, problemsEl, changesEl, stripEl, overviewEl);
  showConnection('past');
  const { body: list, headers } = await getJSONAndHeaders(`/v1/at?time=${encodeURIComponent(text)}`);
  // The instant the server showed: an age resolved by its clock.
  const instant = headers.get('nodekeeper-at') || text;
  const moment = Date.parse(instant);
  const age = Number.isNaN(Date.parse(text));
  if (age && !Number.isNaN(moment)) {
    // The link names the time from now on: later, or sent on, it shows the same moment.
    history.replaceState(null, '', `/ui/at/${encodeURIComponent(instant)}${location.search}`);
    document.getElementById('travel-time').value = instant;
    setTitle(`The site at ${instant}`);
  }
  const when = Number.isNaN(moment) ? null : moment;
  const strip = new SiteStrip(stripEl, { marker: when, onPick: travelTo });
  heading.replaceChildren(
    h(
      'p',
      {},
      'The registry rebuilt from its history as it was at ',
      h('strong', { id: 'at-time', 'data-time': instant }, when === null ? text : showTime(when)),
      age ? ` (${text} before it was asked for)` : '',
      ` (after event ${list.metadata.resourceVersion}): what `,
      h('code', {}, `nodekeeper at ${instant}`),
      ' shows. ',
      // With the filters the page has when it is followed.
      h('a', { href: '/ui/', id: 'back-to-now', onclick: (event) => (event.preventDefault(), location.assign(`/ui/${location.search}`)) }, 'Back to now'),
    ),
  );
  heading.dataset.resourceVersion = list.metadata.resourceVersion;
  const then = () => when ?? Date.now();
  const problems = new Problems(problemsEl, { title: 'Not Ready then', now: then });
  const changes = new Changes(changesEl);
  const overview = filteredOverview(overviewEl, { caption: 'Nodes then', now: then, onNodes: (records) => problems.set(records) });
  overview.setNodes(list.items);
  await markRendered('at');
  changes.load(list.items);
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
