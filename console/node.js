// The node page: the node as `describe` shows it (conditions, addresses,
// capacity, labels, taints, cordon state), its condition timeline, and its
// events with their seq numbers. Live through a watch on this one node.

import { h, readyOf, readyWord, showTime, showDuration, ms, debounce } from './dom.js';
import { getJSONOrNull, history, NodeWatch } from './api.js';
import { ConditionTimeline, segments } from './timeline.js';

/** Events shown before "Show all". */
const EVENTS_SHOWN = 200;

function detail(e) {
  switch (e.kind) {
    case 'Registered': {
      const addresses = (e.record?.addresses || []).map((a) => `${a.type}=${a.address}`).join(', ');
      return `from ${e.record?.source ?? '?'}${addresses ? `, addresses ${addresses}` : ''}`;
    }
    case 'ConditionChanged':
      return `${e.condition}: ${e.from ?? '<none>'} -> ${e.to}${e.reason ? ` (${e.reason}${e.message ? `: ${e.message}` : ''})` : ''}`;
    case 'Deleted':
      return e.reason;
    case 'AddressesChanged':
      return `${(e.from || []).map((a) => a.address).join(',') || '<none>'} -> ${(e.to || []).map((a) => a.address).join(',') || '<none>'}`;
    case 'TaintsChanged': {
      const show = (ts) => (ts || []).map((t) => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`).join(',') || '<none>';
      return `${show(e.from)} -> ${show(e.to)}`;
    }
    case 'EvictionStarted':
      return `${e.mode}: ${e.reason}`;
    case 'EvictionDone':
      return e.result;
    case 'CertificateIssued':
      return `client certificate serial ${e.serial} until ${e.notAfter}, CSR ${e.csr}, requested by ${e.requestedBy}, ${e.approval}`;
    default:
      return e.message ?? '';
  }
}

function table(caption, head, rows, attrs = {}) {
  return h(
    'table',
    attrs,
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, ...head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ...rows),
  );
}

function pairs(title, object, id) {
  const entries = Object.entries(object || {});
  return h(
    'section',
    { class: 'facts', id },
    h('h3', {}, title),
    entries.length ? h('dl', { class: 'pairs' }, ...entries.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])) : h('p', { class: 'muted' }, '<none>'),
  );
}

export class NodePage {
  constructor(root, name, { live }) {
    this.root = root;
    this.name = name;
    this.live = live;
    this.events = [];
    this.showAll = false;
    this.watch = null;
    this.describeEl = h('div', { class: 'describe' });
    this.timelineEl = h('section', { class: 'timeline', 'aria-labelledby': 'timeline-title' });
    this.eventsEl = h('section', { class: 'events', 'aria-labelledby': 'events-title' });
    root.replaceChildren(
      h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Overview'), ' / ', name),
      h('h2', { id: 'node-title' }, name, ' ', h('span', { class: 'badge', id: 'node-ready' })),
      this.describeEl,
      h('h2', { id: 'timeline-title' }, 'Condition timeline'),
      this.timelineEl,
      h('h2', { id: 'events-title' }, 'Events'),
      this.eventsEl,
    );
    this.timeline = new ConditionTimeline(this.timelineEl);
    this.refresh = debounce(() => this.update(), 100);
  }

  async load() {
    const [node, events] = await Promise.all([
      getJSONOrNull(`/api/v1/nodes/${encodeURIComponent(this.name)}`),
      history({ node: this.name }),
    ]);
    this.events = events;
    this.showNode(node);
    this.showHistory();
    if (this.live) {
      const version = Math.max(Number(node?.metadata?.resourceVersion || 0), ...events.map((e) => e.seq));
      this.watch = new NodeWatch({
        resourceVersion: version,
        fieldSelector: `metadata.name=${this.name}`,
        onEvents: (batch) => {
          if (batch.length) this.refresh();
        },
        onExpired: () => this.load(),
      });
    }
  }

  stop() {
    this.watch?.stop();
  }

  async update() {
    const after = this.events.length ? this.events[this.events.length - 1].seq : 0;
    const [node, newer] = await Promise.all([
      getJSONOrNull(`/api/v1/nodes/${encodeURIComponent(this.name)}`),
      history({ node: this.name }, { after }),
    ]);
    this.events.push(...newer);
    this.showNode(node);
    this.showHistory();
  }

  showNode(node) {
    const badge = document.getElementById('node-ready');
    if (!node) {
      badge.textContent = 'not registered';
      badge.className = 'badge s-unknown';
      this.describeEl.replaceChildren(h('p', { class: 'notice' }, 'This node is not in the registry now (deleted, or never registered); its history is below.'));
      return;
    }
    const ready = readyOf(node);
    const cordoned = Boolean(node.spec?.unschedulable);
    badge.textContent = `${readyWord(ready)}${cordoned ? ', SchedulingDisabled' : ''}`;
    badge.className = `badge ${ready === 'True' ? 's-ready' : ready === 'False' ? 's-notready' : 's-unknown'}`;
    badge.dataset.ready = ready;
    const st = node.status || {};
    const conditions = (st.conditions || []).map((c) =>
      h(
        'tr',
        { 'data-condition': c.type, 'data-status': c.status },
        h('th', { scope: 'row' }, c.type),
        h('td', {}, h('span', { class: `status-text st-${c.status}` }, c.status)),
        h('td', {}, showTime(c.lastHeartbeatTime)),
        h('td', {}, showTime(c.lastTransitionTime)),
        h('td', {}, c.reason || ''),
        h('td', { class: 'message' }, c.message || ''),
      ),
    );
    const taints = node.spec?.taints || [];
    const resources = (title, r) =>
      h('section', { class: 'facts' }, h('h3', {}, title), h('dl', { class: 'pairs' }, ...Object.entries(r || {}).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
    this.describeEl.replaceChildren(
      h(
        'dl',
        { class: 'pairs head' },
        h('dt', {}, 'Created'),
        h('dd', {}, `${showTime(node.metadata.creationTimestamp)} (${showDuration(Date.now() - ms(node.metadata.creationTimestamp))} ago)`),
        h('dt', {}, 'Unschedulable'),
        h('dd', { id: 'cordon' }, cordoned ? 'true (cordoned)' : 'false'),
        h('dt', {}, 'Taints'),
        h('dd', { id: 'taints' }, taints.length ? taints.map((t) => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`).join(', ') : '<none>'),
        h('dt', {}, 'Provider ID'),
        h('dd', {}, node.spec?.providerID || '<none>'),
        h('dt', {}, 'Resource version'),
        h('dd', {}, node.metadata.resourceVersion),
      ),
      table('Conditions', ['Type', 'Status', 'Last heartbeat', 'Last transition', 'Reason', 'Message'], conditions, { class: 'conditions', id: 'conditions' }),
      table(
        'Addresses',
        ['Type', 'Address'],
        (st.addresses || []).map((a) => h('tr', {}, h('th', { scope: 'row' }, a.type), h('td', {}, a.address))),
        { class: 'addresses', id: 'addresses' },
      ),
      h('div', { class: 'columns' }, resources('Capacity', st.capacity), resources('Allocatable', st.allocatable)),
      pairs('Labels', node.metadata.labels, 'labels'),
      pairs('Annotations', node.metadata.annotations, 'annotations'),
    );
  }

  showHistory() {
    this.timeline.set(segments(this.events));
    const newest = [...this.events].reverse();
    const shown = this.showAll ? newest : newest.slice(0, EVENTS_SHOWN);
    const rows = shown.map((e) =>
      h(
        'tr',
        { 'data-seq': e.seq, 'data-kind': e.kind },
        h('td', { class: 'num' }, String(e.seq)),
        h('td', {}, h('time', { datetime: e.time }, showTime(e.time))),
        h('td', {}, e.kind),
        h('td', { class: 'message' }, detail(e)),
      ),
    );
    const more =
      shown.length < newest.length
        ? h('button', { type: 'button', class: 'more', onclick: () => ((this.showAll = true), this.showHistory()) }, `Show all ${newest.length} events`)
        : null;
    this.eventsEl.replaceChildren(
      table(`${newest.length} events, newest first`, ['Seq', 'Time', 'Kind', 'Detail'], rows, { class: 'event-list', id: 'event-list' }),
      ...(more ? [more] : []),
    );
  }
}
