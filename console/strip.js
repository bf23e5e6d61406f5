// The site timeline: one strip over the whole kept history showing how many
// nodes were Ready, NotReady and Unknown (from GET /v1/readiness), and in
// grey over them the times no controller ran: nothing watched the nodes then,
// so the counts the history last had say nothing about them. A gap still
// open (a stopped controller) runs to the end of the strip. Clicking a
// moment, or Enter on the keyboard cursor, opens the site as it was then.

import { s, h, ms, showTime, showTip, hideTip } from './dom.js';
import { getJSON } from './api.js';

const HEIGHT = 64;

export class SiteStrip {
  /**
   * @param root the element to fill
   * @param options.marker a time (ms) to mark: the instant time travel shows
   * @param options.onPick called with the picked time (ms)
   */
  constructor(root, { marker = null, onPick }) {
    this.root = root;
    this.marker = marker;
    this.onPick = onPick;
    this.data = null;
    this.cursor = null;
    this.svg = s('svg', {
      class: 'strip',
      role: 'slider',
      tabindex: '0',
      'aria-label': 'Site timeline: Ready, NotReady and Unknown nodes over the kept history. Left and right move, Enter opens the site at that moment.',
      'aria-valuemin': '0',
      'aria-valuemax': '0',
      'aria-valuenow': '0',
      preserveAspectRatio: 'none',
    });
    this.range = h('p', { class: 'strip-range' });
    root.replaceChildren(h('h2', { class: 'strip-title' }, 'Site timeline'), this.svg, this.range);
    this.svg.addEventListener('mousemove', (event) => this.hover(this.indexAt(event.clientX)));
    this.svg.addEventListener('mouseleave', () => {
      if (document.activeElement !== this.svg) hideTip();
    });
    this.svg.addEventListener('click', (event) => this.pick(this.timeAt(event.clientX)));
    this.svg.addEventListener('keydown', (event) => this.key(event));
    this.svg.addEventListener('focus', () => this.hover(this.cursor ?? this.markerIndex() ?? this.buckets() - 1));
    this.svg.addEventListener('blur', hideTip);
  }

  buckets() {
    return this.data?.buckets.length ?? 0;
  }

  async load() {
    const width = Math.max(100, Math.min(4000, Math.floor(this.root.clientWidth || 800)));
    const want = Math.max(50, Math.min(width, 1500));
    this.data = await getJSON(`/v1/readiness?buckets=${want}`);
    this.render();
  }

  bucketTime(i) {
    const from = ms(this.data.from);
    const to = ms(this.data.to);
    return from + ((to - from) * (i + 1)) / this.buckets();
  }

  markerIndex() {
    if (this.marker === null || !this.data?.from) return null;
    const from = ms(this.data.from);
    const to = ms(this.data.to);
    const i = Math.floor(((this.marker - from) / Math.max(1, to - from)) * this.buckets());
    return Math.min(Math.max(i, 0), this.buckets() - 1);
  }

  render() {
    const d = this.data;
    const n = d.buckets.length;
    this.svg.replaceChildren();
    if (!d.from || n === 0) {
      this.range.textContent = 'No history yet.';
      return;
    }
    this.svg.setAttribute('viewBox', `0 0 ${n} ${HEIGHT}`);
    this.svg.setAttribute('aria-valuemax', String(n - 1));
    const max = Math.max(1, ...d.buckets.map((b) => b.ready + b.notReady + b.unknown));
    // One path per status: stacked columns, Ready at the bottom.
    const paths = { ready: [], notReady: [], unknown: [], dip: [] };
    d.buckets.forEach((b, x) => {
      const scale = (v) => (v / max) * HEIGHT;
      let y = HEIGHT;
      for (const key of ['ready', 'notReady', 'unknown']) {
        const height = scale(b[key]);
        if (height > 0) paths[key].push(`M${x} ${y - height}h1v${height}h-1z`);
        y -= height;
      }
      if (b.minReady < b.ready) {
        // A dip inside the bucket that its end no longer shows.
        const top = HEIGHT - scale(b.ready);
        paths.dip.push(`M${x} ${top}h1v${scale(b.ready - b.minReady)}h-1z`);
      }
    });
    const from = ms(d.from);
    const span = Math.max(1, ms(d.to) - from);
    for (const [key, cls] of [['ready', 's-ready'], ['notReady', 's-notready'], ['unknown', 's-unknown'], ['dip', 'dip']]) {
      if (paths[key].length) this.svg.append(s('path', { class: `area ${cls}`, d: paths[key].join('') }));
    }
    // Over the counts, whatever they say.
    for (const gap of d.gaps) {
      const x0 = Math.max(0, ((ms(gap.from) - from) / span) * n);
      const x1 = Math.min(n, (((gap.to ? ms(gap.to) : ms(d.to)) - from) / span) * n);
      if (x1 > 0 && x0 < n) {
        const width = Math.max(1, x1 - x0);
        this.svg.append(s('rect', { class: 'gap', x: Math.min(x0, n - width), y: 0, width, height: HEIGHT, 'data-from': gap.from, 'data-to': gap.to ?? '' }));
      }
    }
    const markerIndex = this.markerIndex();
    if (markerIndex !== null) {
      this.svg.append(s('rect', { class: 'marker', x: ((this.marker - from) / span) * n - 0.5, y: 0, width: Math.max(1, n / 400), height: HEIGHT }));
    }
    this.cursorEl = s('rect', { class: 'cursor', x: 0, y: 0, width: Math.max(1, n / 300), height: HEIGHT, visibility: 'hidden' });
    this.svg.append(this.cursorEl);
    this.range.replaceChildren(
      h('span', {}, showTime(d.from)),
      h('span', { class: 'legend-inline' }, h('span', { class: 'sw s-ready' }), ' Ready ', h('span', { class: 'sw s-notready' }), ' NotReady ', h('span', { class: 'sw s-unknown' }), ' Unknown ', h('span', { class: 'sw gap' }), ' no controller'),
      h('span', {}, showTime(d.to)),
    );
  }

  indexAt(clientX) {
    const box = this.svg.getBoundingClientRect();
    const i = Math.floor(((clientX - box.left) / Math.max(1, box.width)) * this.buckets());
    return Math.min(Math.max(i, 0), this.buckets() - 1);
  }

  timeAt(clientX) {
    const box = this.svg.getBoundingClientRect();
    const share = Math.min(Math.max((clientX - box.left) / Math.max(1, box.width), 0), 1);
    const from = ms(this.data.from);
    return from + share * (ms(this.data.to) - from);
  }

  hover(i) {
    if (!this.data || i === null || i < 0 || i >= this.buckets()) return;
    this.cursor = i;
    const b = this.data.buckets[i];
    const x = (i / this.buckets()) * this.svg.viewBox.baseVal.width;
    this.cursorEl?.setAttribute('x', String(x));
    this.cursorEl?.setAttribute('visibility', 'visible');
    const when = showTime(this.bucketTime(i));
    const gap = this.gapAt(i);
    const counts = `${b.ready} Ready, ${b.notReady} NotReady, ${b.unknown} Unknown`;
    const stopped = gap && (gap.to ? `No controller ran from ${showTime(gap.from)} to ${showTime(gap.to)}` : `No controller has run since ${showTime(gap.from)} (still stopped)`);
    this.svg.setAttribute('aria-valuenow', String(i));
    this.svg.setAttribute('aria-valuetext', stopped ? `${when}: ${stopped}` : `${when}: ${counts}`);
    const lines = [when];
    if (stopped) lines.push(stopped, `Nothing watched the nodes; last recorded: ${counts}`);
    else lines.push(`${b.ready} Ready · ${b.notReady} NotReady · ${b.unknown} Unknown`);
    if (!stopped && b.minReady < b.ready) lines.push(`as few as ${b.minReady} Ready inside this slice`);
    lines.push('Click or press Enter to see the site then');
    showTip(this.cursorEl || this.svg, lines);
  }

  /** The downtime that covers any of bucket `i`, if one does. */
  gapAt(i) {
    const end = this.bucketTime(i);
    const start = this.bucketTime(i - 1);
    const to = ms(this.data.to);
    return this.data.gaps.find((g) => ms(g.from) < end && (g.to ? ms(g.to) : to) > start) || null;
  }

  key(event) {
    const n = this.buckets();
    if (!n) return;
    const step = event.shiftKey ? Math.max(1, Math.floor(n / 20)) : 1;
    const i = this.cursor ?? n - 1;
    const next = { ArrowLeft: i - step, ArrowRight: i + step, Home: 0, End: n - 1 }[event.key];
    if (next !== undefined) {
      event.preventDefault();
      this.hover(Math.min(Math.max(next, 0), n - 1));
    } else if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      this.pick(this.bucketTime(i));
    }
  }

  pick(time) {
    hideTip();
    if (this.onPick && Number.isFinite(time)) this.onPick(Math.round(time));
  }
}

