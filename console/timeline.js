// A node's condition timeline: one band per condition, one segment per
// stretch of one status, built from the node's history (the same events
// `nodekeeper history NODE` prints). Segments carry data-condition,
// data-status, data-from and data-to (RFC 3339 as the history has them;
// data-to is empty while the segment is still open).

import { h, s, ms, showTime, showDuration, showTip, hideTip, readyWord } from './dom.js';

const WIDTH = 1000;
const BAND = 24;

export const ZOOMS = [
  ['hour', 'Last hour', 3600e3],
  ['day', 'Last day', 86400e3],
  ['week', 'Last week', 7 * 86400e3],
  ['all', 'Everything kept', Infinity],
];

/**
 * Segments from a node's history, oldest first: a registration opens one per
 * condition the record carries, a ConditionChanged closes that condition's
 * open segment and opens the next, a deletion closes them all.
 */
export function segments(events) {
  const out = [];
  const open = new Map();
  const close = (condition, time) => {
    const seg = open.get(condition);
    if (seg) {
      seg.to = time;
      open.delete(condition);
    }
  };
  const start = (condition, status, time, reason, message, seq) => {
    close(condition, time);
    const seg = { condition, status, from: time, to: '', reason: reason || '', message: message || '', seq };
    open.set(condition, seg);
    out.push(seg);
  };
  for (const e of events) {
    if (e.kind === 'Registered') {
      for (const c of open.keys()) close(c, e.time);
      for (const c of e.record?.conditions || []) start(c.type, c.status, e.time, c.reason, c.message, e.seq);
    } else if (e.kind === 'ConditionChanged') {
      start(e.condition, e.to, e.time, e.reason, e.message, e.seq);
    } else if (e.kind === 'Deleted') {
      for (const c of [...open.keys()]) close(c, e.time);
    }
  }
  return out;
}

function statusClass(condition, status) {
  // Ready=True is good; for the pressure conditions True is the bad one.
  const good = condition === 'Ready' ? status === 'True' : status === 'False';
  if (status === 'Unknown') return 's-unknown';
  return good ? 's-ready' : 's-notready';
}

function statusText(condition, status) {
  return condition === 'Ready' ? `${status} (${readyWord(status)})` : status;
}

export class ConditionTimeline {
  constructor(root) {
    this.root = root;
    this.zoom = 'all';
    this.segments = [];
    this.toolbar = h('div', { class: 'zoom', role: 'group', 'aria-label': 'Zoom' });
    for (const [key, label] of ZOOMS) {
      const button = h('button', { type: 'button', 'data-zoom': key, 'aria-pressed': String(key === this.zoom) }, label);
      button.addEventListener('click', () => this.setZoom(key));
      this.toolbar.append(button);
    }
    this.bands = h('div', { class: 'bands' });
    this.axis = h('div', { class: 'axis', 'aria-hidden': 'true' });
    this.bands.addEventListener('keydown', (event) => this.key(event));
    this.bands.addEventListener('mouseover', (event) => this.tip(event.target));
    this.bands.addEventListener('focusin', (event) => this.tip(event.target));
    this.bands.addEventListener('mouseout', hideTip);
    this.bands.addEventListener('focusout', hideTip);
    root.replaceChildren(this.toolbar, this.bands, this.axis);
  }

  set(segments) {
    this.segments = segments;
    this.render();
  }

  setZoom(key) {
    this.zoom = key;
    for (const b of this.toolbar.children) b.setAttribute('aria-pressed', String(b.dataset.zoom === key));
    this.render();
  }

  window() {
    const end = Date.now();
    const span = ZOOMS.find(([key]) => key === this.zoom)[2];
    if (Number.isFinite(span)) return [end - span, end];
    const first = this.segments.length ? Math.min(...this.segments.map((seg) => ms(seg.from))) : end - 3600e3;
    return [first, Math.max(end, first + 1000)];
  }

  render() {
    hideTip();
    const [start, end] = this.window();
    const scale = (t) => ((t - start) / (end - start)) * WIDTH;
    const conditions = [...new Set(this.segments.map((seg) => seg.condition))].sort((a, b) => (a === 'Ready' ? -1 : b === 'Ready' ? 1 : a < b ? -1 : 1));
    const rows = [];
    for (const condition of conditions) {
      const svg = s('svg', { class: 'band-svg', viewBox: `0 0 ${WIDTH} ${BAND}`, preserveAspectRatio: 'none', role: 'list', 'aria-label': `${condition} over time` });
      let first = true;
      for (const seg of this.segments) {
        if (seg.condition !== condition) continue;
        const from = ms(seg.from);
        const to = seg.to ? ms(seg.to) : end;
        if (to < start || from > end) continue;
        const x0 = scale(Math.max(from, start));
        const x1 = scale(Math.min(to, end));
        const label = `${condition} ${statusText(condition, seg.status)} from ${showTime(seg.from)} ${seg.to ? `to ${showTime(seg.to)}` : 'until now'}${seg.reason ? `: ${seg.reason}` : ''}`;
        const rect = s('rect', {
          class: `seg ${statusClass(condition, seg.status)}`,
          x: x0,
          y: 2,
          width: Math.max(x1 - x0, 2),
          height: BAND - 4,
          tabindex: first ? '0' : '-1',
          role: 'listitem',
          'aria-label': label,
          'data-condition': seg.condition,
          'data-status': seg.status,
          'data-from': seg.from,
          'data-to': seg.to,
        });
        rect.segment = seg;
        svg.append(rect);
        first = false;
      }
      rows.push(h('div', { class: 'band', 'data-band': condition }, h('span', { class: 'band-name' }, condition), svg));
    }
    if (rows.length === 0) rows.push(h('p', { class: 'muted' }, 'No condition has been recorded for this node.'));
    this.bands.replaceChildren(...rows);
    this.axis.replaceChildren(...[0, 0.25, 0.5, 0.75, 1].map((f) => h('span', {}, showTime(start + f * (end - start)))));
  }

  tip(target) {
    const seg = target?.segment;
    if (!seg) return;
    const to = seg.to ? ms(seg.to) : Date.now();
    showTip(target, [
      `${seg.condition}: ${statusText(seg.condition, seg.status)}`,
      `${showTime(seg.from)} → ${seg.to ? showTime(seg.to) : 'now'} (${showDuration(to - ms(seg.from))})`,
      seg.reason ? `Reason: ${seg.reason}` : 'No reason given',
      seg.message ? `Message: ${seg.message}` : '',
    ].filter(Boolean));
  }

  /** Left and right move along a band, up and down between bands. */
  key(event) {
    const rect = event.target;
    if (!rect.segment) return;
    const band = rect.closest('.band');
    const segs = [...band.querySelectorAll('.seg')];
    const i = segs.indexOf(rect);
    let next = null;
    if (event.key === 'ArrowRight') next = segs[i + 1];
    else if (event.key === 'ArrowLeft') next = segs[i - 1];
    else if (event.key === 'Home') next = segs[0];
    else if (event.key === 'End') next = segs[segs.length - 1];
    else if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      const bands = [...this.bands.querySelectorAll('.band')];
      const other = bands[bands.indexOf(band) + (event.key === 'ArrowDown' ? 1 : -1)];
      if (other) {
        const x = Number(rect.getAttribute('x'));
        const candidates = [...other.querySelectorAll('.seg')];
        next = candidates.filter((c) => Number(c.getAttribute('x')) <= x).pop() || candidates[0];
      }
    } else return;
    event.preventDefault();
    if (!next) return;
    rect.setAttribute('tabindex', '-1');
    next.setAttribute('tabindex', '0');
    // Every band keeps one tab stop.
    if (!band.querySelector('.seg[tabindex="0"]')) band.querySelector('.seg')?.setAttribute('tabindex', '0');
    next.focus();
  }
}
