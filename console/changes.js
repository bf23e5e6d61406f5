// Time travel's comparison with now: the nodes whose Ready status differs
// between the moment shown and the registry now, those that came or went
// included.

import { h, esc, readyOf, readyText, showTime } from './dom.js';
import { getJSON } from './api.js';

/** Rows drawn before "Show all". */
const ROWS_SHOWN = 100;

function word(status) {
  return status ? readyText(status) : 'not registered';
}

export class Changes {
  constructor(root) {
    this.root = root;
    this.changes = [];
    this.showAll = false;
    root.id = 'changes';
    root.classList.add('changes');
    root.setAttribute('aria-labelledby', 'changes-title');
    root.dataset.state = 'loading';
    this.summary = h('p', { class: 'changes-summary' }, 'Comparing with now…');
    this.table = h('div', { class: 'list-scroll' });
    this.more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => ((this.showAll = true), this.render()) });
    root.replaceChildren(h('h2', { id: 'changes-title' }, 'Changed between then and now'), this.summary, this.table, this.more);
  }

  /** Compares `then` (the nodes at the moment) with the node list now. */
  async load(then) {
    try {
      const now = await getJSON('/api/v1/nodes');
      this.asOf = `resourceVersion ${now.metadata.resourceVersion}, read at ${showTime(Date.now())}`;
      const before = new Map(then.map((n) => [n.metadata.name, readyOf(n)]));
      const after = new Map(now.items.map((n) => [n.metadata.name, readyOf(n)]));
      const names = new Set([...before.keys(), ...after.keys()]);
      this.changes = [...names]
        .filter((name) => before.get(name) !== after.get(name))
        .sort()
        .map((name) => ({ name, then: before.get(name) || '', now: after.get(name) || '' }));
      this.render();
      this.root.dataset.state = 'done';
    } catch (error) {
      this.summary.textContent = `Could not read the nodes now: ${error.message}`;
      this.root.dataset.state = 'failed';
    }
  }

  render() {
    const changes = this.changes;
    this.root.dataset.count = String(changes.length);
    this.summary.textContent = changes.length
      ? `${changes.length} ${changes.length === 1 ? 'node differs' : 'nodes differ'} from now (the registry at ${this.asOf}).`
      : `Every node's Ready status is the same now (the registry at ${this.asOf}).`;
    const shown = this.showAll ? changes : changes.slice(0, ROWS_SHOWN);
    const rows = shown.map((c) => {
      const name = esc(c.name);
      return (
        `<tr data-changed="${name}" data-then="${c.then}" data-now="${c.now}">` +
        `<th scope="row"><a href="/ui/nodes/${esc(encodeURIComponent(c.name))}">${name}</a></th>` +
        `<td><span class="status-text st-${c.then || 'none'}">${word(c.then)}</span></td>` +
        `<td><span class="status-text st-${c.now || 'none'}">${word(c.now)}</span></td></tr>`
      );
    });
    this.table.innerHTML = changes.length
      ? '<table class="change-list"><caption class="visually-hidden">Nodes whose Ready status changed</caption>' +
        '<thead><tr><th scope="col">Node</th><th scope="col">Then</th><th scope="col">Now</th></tr></thead>' +
        `<tbody>${rows.join('')}</tbody></table>`
      : '';
    this.more.hidden = shown.length === changes.length;
    this.more.textContent = `Show all ${changes.length}`;
  }
}
