// The problems list: every node not Ready (NotReady or Unknown) with its
// reason, since when and for how long, longest first. It comes first on the
// overview and on time travel, so that a few broken nodes among thousands
// are seen at once.

import { h, esc, readyText, showTime, showDuration } from './dom.js';

/** Rows drawn before "Show all": a site-wide outage is counted, not drawn row by row. */
const ROWS_SHOWN = 100;

/** How often the "for how long" column is brought up to date on a live page. */
const TICK_MS = 30_000;

/** Longest first; a node without a time first of all (how long is not known). */
function byLongest(a, b) {
  const at = (rec) => (Number.isNaN(rec.sinceMs) ? -Infinity : rec.sinceMs);
  return at(a) - at(b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

/**
 * The first `count` of `records` in the order of byLongest. A selection, not
 * a sort: a site-wide outage puts every node on the list, and this runs at
 * every change.
 */
function longest(records, count) {
  const top = [];
  for (const rec of records) {
    if (top.length === count && byLongest(rec, top[count - 1]) >= 0) continue;
    let lo = 0;
    let hi = top.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byLongest(top[mid], rec) <= 0) lo = mid + 1;
      else hi = mid;
    }
    top.splice(lo, 0, rec);
    if (top.length > count) top.pop();
  }
  return top;
}

export class Problems {
  /**
   * @param root the element to fill
   * @param options.title the heading
   * @param options.now the moment durations run to (now, or the moment time travel shows)
   * @param options.live whether durations keep running
   */
  constructor(root, { title, now = () => Date.now(), live = false }) {
    this.root = root;
    this.now = now;
    this.problems = [];
    this.total = 0;
    this.showAll = false;
    root.id = 'problems';
    root.classList.add('problems');
    root.setAttribute('aria-labelledby', 'problems-title');
    this.summary = h('p', { class: 'problems-summary', 'aria-live': 'polite' }, 'Loading…');
    this.table = h('div', { class: 'list-scroll' });
    this.more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => ((this.showAll = true), this.render()) });
    // What the table shows now: the same rows again are not drawn again.
    this.drawn = '';
    root.replaceChildren(h('h2', { id: 'problems-title' }, title), this.summary, this.table, this.more);
    if (live) setInterval(() => this.render(), TICK_MS);
  }

  /** Shows the records (the overview's, see overview.js) that are not Ready. */
  set(records) {
    const problems = [];
    let total = 0;
    for (const rec of records) {
      total += 1;
      if (rec.ready !== 'True') problems.push(rec);
    }
    this.problems = problems;
    this.total = total;
    this.render();
  }

  render() {
    const problems = this.problems;
    this.root.dataset.count = String(problems.length);
    if (problems.length === 0) {
      this.summary.textContent = this.total ? `Every node is Ready (${this.total}).` : 'No nodes.';
      this.table.replaceChildren();
      this.drawn = '';
      this.more.hidden = true;
      return;
    }
    const notReady = problems.filter((p) => p.ready === 'False').length;
    this.summary.textContent = `${problems.length} of ${this.total} nodes not Ready: ${notReady} NotReady, ${problems.length - notReady} Unknown. Longest first.`;
    const now = this.now();
    const shown = this.showAll ? [...problems].sort(byLongest) : longest(problems, ROWS_SHOWN);
    const rows = shown.map((p) => {
      const name = esc(p.name);
      const since = p.since ? `<time datetime="${esc(p.since)}">${esc(showTime(p.since))}</time>` : '';
      return (
        `<tr data-problem="${name}" data-ready="${p.ready}" data-since="${esc(p.since)}">` +
        `<th scope="row"><a href="/ui/nodes/${esc(encodeURIComponent(p.name))}">${name}</a></th>` +
        `<td><span class="status-text st-${p.ready}">${readyText(p.ready)}</span></td>` +
        `<td class="message">${p.reason ? esc(p.reason) : '<span class="muted">no reason given</span>'}${p.message ? `<div class="muted">${esc(p.message)}</div>` : ''}</td>` +
        `<td>${since}</td>` +
        `<td class="num">${Number.isNaN(p.sinceMs) ? '' : esc(showDuration(now - p.sinceMs))}</td></tr>`
      );
    });
    const html =
      '<table class="problem-list"><caption class="visually-hidden">Nodes not Ready, longest first</caption>' +
      '<thead><tr><th scope="col">Node</th><th scope="col">Ready</th><th scope="col">Reason</th><th scope="col">Since</th><th scope="col">For</th></tr></thead>' +
      `<tbody>${rows.join('')}</tbody></table>`;
    if (html !== this.drawn) {
      this.table.innerHTML = html;
      this.drawn = html;
    }
    this.more.hidden = shown.length === problems.length;
    this.more.textContent = `Show all ${problems.length}`;
  }
}
