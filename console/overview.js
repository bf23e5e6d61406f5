// The site overview: counts by Ready status and zone, and every node as a
// tile grouped by zone, with find-by-name, label selector and status
// filters, and a card on hover or focus saying what a tile is. Built for
// 10,000 nodes: tiles are made as one HTML string per zone, live changes are
// applied in one batch per frame, filters touch only the tiles whose
// visibility changes, and one card serves every tile.

import { h, esc, ms, readyWord, readyText, readyCondition, zoneOf, showTime, showDuration, showTip, hideTip, STATUSES, NO_ZONE } from './dom.js';
import { labelSelector } from './selector.js';

/** Up to this many nodes, tiles are large enough to carry their names. */
const NAMED_TILES_UP_TO = 300;

const STATUS_CLASS = { True: 's-ready', False: 's-notready', Unknown: 's-unknown' };

function summarize(node) {
  const labels = node.metadata?.labels || {};
  const condition = readyCondition(node);
  const ready = condition && STATUSES.includes(condition.status) ? condition.status : 'Unknown';
  // Without a Ready condition a node has been Unknown since it was made.
  const since = condition?.lastTransitionTime || node.metadata.creationTimestamp || '';
  return {
    name: node.metadata.name,
    ready,
    reason: condition?.reason || '',
    message: condition?.message || '',
    since,
    // Parsed once, for the problems list's order: only nodes not Ready are on it.
    sinceMs: ready !== 'True' && since ? ms(since) : NaN,
    zone: zoneOf(labels),
    labels,
    cordoned: Boolean(node.spec?.unschedulable),
    el: null,
    matches: true,
  };
}

/** A tile's accessible name; sighted users get the card (see `cardLines`). */
function tileLabel(rec) {
  return `${rec.name}: ${readyWord(rec.ready)}${rec.cordoned ? ', cordoned' : ''}`;
}

function tileHTML(rec, named) {
  const cls = `tile ${STATUS_CLASS[rec.ready]}${rec.cordoned ? ' cordoned' : ''}`;
  const name = esc(rec.name);
  return `<a class="${cls}" href="/ui/nodes/${esc(encodeURIComponent(rec.name))}" data-node="${name}" data-ready="${rec.ready}" aria-label="${esc(tileLabel(rec))}" tabindex="-1">${named ? `<span>${name}</span>` : ''}</a>`;
}

/** What a tile's card says: the node, its Ready status, reason, and since when. */
function cardLines(rec, now) {
  return [
    rec.name,
    `Ready: ${readyText(rec.ready)}${rec.cordoned ? ', cordoned' : ''}`,
    rec.reason ? `Reason: ${rec.reason}` : 'No reason given',
    rec.since ? `Since ${showTime(rec.since)} (${showDuration(now - ms(rec.since))})` : '',
    rec.message,
  ].filter(Boolean);
}

function byName(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

export class Overview {
  /**
   * @param root the element to fill
   * @param options.caption what the overview shows (live, or a past instant)
   * @param options.now the moment the cards' durations run to
   * @param options.onNodes called with every node's record once nodes come or
   *   go or a Ready condition changes (not for heartbeats alone)
   * @param options.onFilters called when the user changes a filter, with the
   *   filters and whether the change starts something new (see link.js)
   */
  constructor(root, { caption = '', now = () => Date.now(), onNodes = () => {}, onFilters = () => {} } = {}) {
    this.root = root;
    this.now = now;
    this.onNodes = onNodes;
    this.onFilters = onFilters;
    this.nodes = new Map();
    this.zones = new Map();
    this.hiddenStatuses = new Set();
    this.nameFilter = '';
    this.selector = null;
    // The field being typed in: its keystrokes after the first make no new history entry.
    this.editing = null;
    this.pending = [];
    this.frame = 0;
    this.build(caption);
  }

  build(caption) {
    this.summary = h('div', { class: 'summary', role: 'group', 'aria-label': 'Nodes by Ready status; press to show or hide' });
    this.totalEl = h('span', { class: 'total' });
    this.statusButtons = {};
    for (const status of STATUSES) {
      const count = h('b', { class: 'n' }, '0');
      const button = h(
        'button',
        { type: 'button', class: `count ${STATUS_CLASS[status]}`, 'data-status': status, 'aria-pressed': 'true' },
        h('span', { class: 'swatch', 'aria-hidden': 'true' }),
        ` ${readyWord(status)} `,
        count,
      );
      button.addEventListener('click', () => {
        this.toggleStatus(status);
        this.filtersChanged(null);
      });
      this.statusButtons[status] = { button, count };
      this.summary.append(button);
    }
    this.summary.append(this.totalEl);

    this.nameInput = h('input', { type: 'search', id: 'find-name', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. edge-1' });
    this.selectorInput = h('input', { type: 'search', id: 'find-labels', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. topology.kubernetes.io/zone=rack-a', 'aria-describedby': 'selector-error' });
    this.selectorError = h('p', { class: 'error', id: 'selector-error', role: 'alert' });
    this.shownEl = h('p', { class: 'shown', id: 'shown', 'aria-live': 'polite' });
    this.nameInput.addEventListener('input', () => {
      this.setName(this.nameInput.value);
      this.filtersChanged('name');
    });
    this.nameInput.addEventListener('keydown', (event) => {
      if (event.key !== 'Enter') return;
      const only = [...this.nodes.values()].filter((r) => r.matches && !this.hiddenStatuses.has(r.ready));
      if (only.length === 1) only[0].el?.click();
    });
    this.selectorInput.addEventListener('input', () => {
      this.setSelector(this.selectorInput.value);
      this.filtersChanged('labels');
    });
    for (const input of [this.nameInput, this.selectorInput]) input.addEventListener('change', () => (this.editing = null));
    const filters = h(
      'div',
      { class: 'filters', role: 'search', 'aria-label': 'Find nodes' },
      h('label', { for: 'find-name' }, 'Find by name'),
      this.nameInput,
      h('label', { for: 'find-labels' }, 'Label selector'),
      this.selectorInput,
    );

    this.zoneTable = h('table', { class: 'zone-table' });
    this.grid = h('div', { class: 'zones' });
    this.grid.addEventListener('keydown', (event) => this.moveFocus(event));
    this.grid.addEventListener('animationend', (event) => event.target.classList?.remove('changed'));
    this.grid.addEventListener('mouseover', (event) => this.showCard(event.target));
    this.grid.addEventListener('focusin', (event) => this.showCard(event.target));
    this.grid.addEventListener('mouseout', hideTip);
    this.grid.addEventListener('focusout', hideTip);
    const legend = h(
      'p',
      { class: 'legend', 'aria-hidden': 'true' },
      ...STATUSES.map((s) => h('span', {}, h('span', { class: `tile ${STATUS_CLASS[s]}` }), ` ${readyWord(s)}`)),
      h('span', {}, h('span', { class: 'tile s-ready cordoned' }), ' cordoned'),
    );
    this.root.replaceChildren(
      h('h2', { id: 'overview-title' }, caption || 'Nodes'),
      this.summary,
      filters,
      this.selectorError,
      this.shownEl,
      h('details', { class: 'zones-detail', open: true }, h('summary', {}, 'Counts by zone'), this.zoneTable),
      legend,
      this.grid,
    );
  }

  setName(text) {
    this.nameFilter = text.trim().toLowerCase();
    this.refilter();
  }

  setSelector(text) {
    const selector = text.trim();
    try {
      this.selector = selector ? labelSelector(selector) : null;
      this.selectorError.textContent = '';
      this.selectorInput.removeAttribute('aria-invalid');
    } catch (error) {
      this.selector = () => false;
      this.selectorError.textContent = `Label selector: ${error.message}`;
      this.selectorInput.setAttribute('aria-invalid', 'true');
    }
    this.refilter();
  }

  /** The filters as link.js keeps them in the URL. */
  filters() {
    return { name: this.nameInput.value.trim(), labels: this.selectorInput.value.trim(), hide: [...this.hiddenStatuses] };
  }

  /** Sets every filter at once (from a link, or the back button). */
  setFilters({ name, labels, hide }) {
    this.editing = null;
    this.nameInput.value = name;
    this.selectorInput.value = labels;
    this.nameFilter = name.trim().toLowerCase();
    this.setSelector(labels);
    this.setHidden(hide);
  }

  filtersChanged(field) {
    const push = field === null || this.editing !== field;
    this.editing = field;
    this.onFilters(this.filters(), { push });
  }

  /** Shows the card of the tile under the pointer or focus. */
  showCard(target) {
    const tile = target.closest?.('.tile');
    const rec = tile && this.nodes.get(tile.dataset.node);
    if (rec) showTip(tile, cardLines(rec, this.now()));
  }

  /** Replaces every node (a list, or the registry at a past instant). */
  setNodes(items) {
    this.nodes.clear();
    this.zones.clear();
    const byZone = new Map();
    for (const item of items) {
      const rec = summarize(item);
      this.nodes.set(rec.name, rec);
      if (!byZone.has(rec.zone)) byZone.set(rec.zone, []);
      byZone.get(rec.zone).push(rec);
    }
    this.named = this.nodes.size <= NAMED_TILES_UP_TO;
    this.grid.classList.toggle('named', this.named);
    const zoneNames = [...byZone.keys()].sort((a, b) => (a === NO_ZONE ? 1 : b === NO_ZONE ? -1 : byName(a, b)));
    const html = [];
    for (const zone of zoneNames) {
      const recs = byZone.get(zone).sort((a, b) => byName(a.name, b.name));
      html.push(
        `<section class="zone" data-zone="${esc(zone)}"><h3>${esc(zone)} <span class="zone-count"></span></h3>` +
          `<div class="tiles" role="group" aria-label="${esc(`Nodes in ${zone}`)}">${recs.map((r) => tileHTML(r, this.named)).join('')}</div></section>`,
      );
    }
    this.grid.innerHTML = html.join('');
    for (const section of this.grid.children) {
      const zone = section.dataset.zone;
      const tiles = section.lastElementChild;
      const recs = byZone.get(zone);
      let i = 0;
      for (const el of tiles.children) recs[i++].el = el;
      this.zones.set(zone, { section, tiles, names: recs.map((r) => r.name) });
    }
    this.refilter();
    this.onNodes(this.nodes.values());
  }

  /** Queues watch events; they are applied together at the next frame. */
  apply(events) {
    if (events.length === 0) return;
    this.pending.push(...events);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    // Timed, for the tests and the benchmark: the page's own work per update.
    const started = performance.now();
    this.frame = 0;
    const events = this.pending;
    this.pending = [];
    const touched = [];
    let readyChanged = false;
    for (const event of events) {
      const name = event.object?.metadata?.name;
      if (!name) continue;
      const old = this.nodes.get(name);
      if (event.type === 'DELETED') {
        if (old) this.remove(old);
        readyChanged ||= Boolean(old);
        continue;
      }
      const rec = summarize(event.object);
      readyChanged ||= !old || old.ready !== rec.ready || old.since !== rec.since || old.reason !== rec.reason || old.message !== rec.message;
      if (!old) {
        this.insert(rec);
      } else if (old.zone !== rec.zone) {
        this.remove(old);
        this.insert(rec);
      } else {
        rec.el = old.el;
        this.nodes.set(name, rec);
        if (old.ready !== rec.ready || old.cordoned !== rec.cordoned) {
          const el = rec.el;
          el.className = `tile ${STATUS_CLASS[rec.ready]}${rec.cordoned ? ' cordoned' : ''} changed`;
          el.dataset.ready = rec.ready;
          el.setAttribute('aria-label', tileLabel(rec));
        }
      }
      touched.push(this.nodes.get(name));
    }
    for (const rec of touched) this.filterOne(rec);
    this.recount();
    if (readyChanged) this.onNodes(this.nodes.values());
    performance.measure('overview-update', { start: started });
  }

  insert(rec) {
    let zone = this.zones.get(rec.zone);
    if (!zone) {
      const tiles = h('div', { class: 'tiles', role: 'group', 'aria-label': `Nodes in ${rec.zone}` });
      const section = h('section', { class: 'zone', 'data-zone': rec.zone }, h('h3', {}, `${rec.zone} `, h('span', { class: 'zone-count' })), tiles);
      const after = [...this.zones.keys()].filter((z) => (rec.zone === NO_ZONE ? false : z === NO_ZONE || byName(z, rec.zone) > 0)).sort(byName)[0];
      this.grid.insertBefore(section, after ? this.zones.get(after).section : null);
      zone = { section, tiles, names: [] };
      this.zones.set(rec.zone, zone);
    }
    let lo = 0;
    let hi = zone.names.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (zone.names[mid] < rec.name) lo = mid + 1;
      else hi = mid;
    }
    const template = document.createElement('template');
    template.innerHTML = tileHTML(rec, this.named);
    rec.el = template.content.firstElementChild;
    rec.el.classList.add('changed');
    const before = zone.names[lo];
    zone.tiles.insertBefore(rec.el, before ? this.nodes.get(before).el : null);
    zone.names.splice(lo, 0, rec.name);
    this.nodes.set(rec.name, rec);
  }

  remove(rec) {
    rec.el?.remove();
    this.nodes.delete(rec.name);
    const zone = this.zones.get(rec.zone);
    if (!zone) return;
    const i = zone.names.indexOf(rec.name);
    if (i >= 0) zone.names.splice(i, 1);
    if (zone.names.length === 0) {
      zone.section.remove();
      this.zones.delete(rec.zone);
    }
  }

  toggleStatus(status) {
    const hide = new Set(this.hiddenStatuses);
    if (hide.has(status)) hide.delete(status);
    else hide.add(status);
    this.setHidden(hide);
  }

  setHidden(statuses) {
    this.hiddenStatuses = new Set(statuses);
    for (const s of STATUSES) {
      this.statusButtons[s].button.setAttribute('aria-pressed', String(!this.hiddenStatuses.has(s)));
      this.grid.classList.toggle(`hide-${s}`, this.hiddenStatuses.has(s));
    }
    this.recount();
  }

  matches(rec) {
    if (this.nameFilter && !rec.name.toLowerCase().includes(this.nameFilter)) return false;
    return !this.selector || this.selector(rec.labels);
  }

  filterOne(rec) {
    const matches = this.matches(rec);
    if (matches !== rec.matches || (rec.el && rec.el.hidden === matches)) {
      rec.matches = matches;
      if (rec.el) rec.el.hidden = !matches;
    }
  }

  refilter() {
    for (const rec of this.nodes.values()) this.filterOne(rec);
    this.recount();
  }

  recount() {
    const total = { True: 0, False: 0, Unknown: 0 };
    const zones = new Map();
    let shown = 0;
    for (const rec of this.nodes.values()) {
      total[rec.ready] += 1;
      if (!zones.has(rec.zone)) zones.set(rec.zone, { True: 0, False: 0, Unknown: 0, shown: 0 });
      const z = zones.get(rec.zone);
      z[rec.ready] += 1;
      if (rec.matches && !this.hiddenStatuses.has(rec.ready)) {
        shown += 1;
        z.shown += 1;
      }
    }
    for (const s of STATUSES) this.statusButtons[s].count.textContent = String(total[s]);
    this.totalEl.textContent = `${this.nodes.size} nodes`;
    this.shownEl.textContent =
      shown === this.nodes.size ? `Showing all ${shown} nodes` : `Showing ${shown} of ${this.nodes.size} nodes`;
    this.shownEl.dataset.shown = String(shown);
    const rows = [
      h('tr', {}, h('th', { scope: 'col' }, 'Zone'), ...STATUSES.map((s) => h('th', { scope: 'col' }, readyWord(s))), h('th', { scope: 'col' }, 'Total')),
    ];
    for (const [zone, { section }] of this.zones) {
      const z = zones.get(zone) || { True: 0, False: 0, Unknown: 0, shown: 0 };
      section.hidden = z.shown === 0;
      section.querySelector('.zone-count').textContent = `${z.True} Ready · ${z.False} NotReady · ${z.Unknown} Unknown`;
      rows.push(
        h('tr', { 'data-zone': zone }, h('th', { scope: 'row' }, zone), ...STATUSES.map((s) => h('td', { 'data-status': s }, String(z[s]))), h('td', {}, String(z.True + z.False + z.Unknown))),
      );
    }
    this.zoneTable.replaceChildren(h('caption', { class: 'visually-hidden' }, 'Nodes by zone and Ready status'), ...rows);
    this.rovingStart();
  }

  /** Keeps one tab stop per zone: its first visible tile (or the one last focused). */
  rovingStart() {
    for (const { tiles } of this.zones.values()) {
      const current = tiles.querySelector('.tile[tabindex="0"]');
      if (current && this.visible(current)) continue;
      if (current) current.tabIndex = -1;
      const first = [...tiles.children].find((el) => this.visible(el));
      if (first) first.tabIndex = 0;
    }
  }

  visible(el) {
    return !el.hidden && !this.hiddenStatuses.has(el.dataset.ready);
  }

  /** Arrow keys, Home and End move between tiles; Enter opens one (it is a link). */
  moveFocus(event) {
    const tile = event.target.closest?.('.tile');
    if (!tile) return;
    const tiles = [...tile.parentElement.children].filter((el) => this.visible(el));
    const i = tiles.indexOf(tile);
    const perRow = Math.max(1, Math.round(tile.parentElement.clientWidth / Math.max(1, tile.offsetWidth + 2)));
    const target = {
      ArrowRight: i + 1,
      ArrowLeft: i - 1,
      ArrowDown: i + perRow,
      ArrowUp: i - perRow,
      Home: 0,
      End: tiles.length - 1,
    }[event.key];
    if (target === undefined) return;
    event.preventDefault();
    const next = tiles[Math.min(Math.max(target, 0), tiles.length - 1)];
    if (!next) return;
    tile.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }
}
