// Mirror and source health (GET /v1/mirror, GET /v1/sources): backlog,
// leadership, last error and last sync. Refreshed when the watch brings a
// change or a bookmark, never on a timer of its own.

import { h, showTime, showDuration, ms } from './dom.js';
import { getJSONOrNull } from './api.js';

function ago(time) {
  return time ? `${showTime(time)} (${showDuration(Date.now() - ms(time))} ago)` : 'never';
}

function row(term, value, attrs = {}) {
  return [h('dt', {}, term), h('dd', attrs, value)];
}

export class Health {
  constructor(root) {
    this.root = root;
    this.mirror = h('section', { class: 'panel', id: 'mirror-health', 'aria-labelledby': 'mirror-title' });
    this.source = h('section', { class: 'panel', id: 'source-health', 'aria-labelledby': 'source-title' });
    root.replaceChildren(this.mirror, this.source);
    this.loading = null;
  }

  /** Reads both again; concurrent calls share one round. */
  refresh() {
    if (!this.loading) this.loading = this.load().finally(() => (this.loading = null));
    return this.loading;
  }

  async load() {
    const [mirror, source] = await Promise.allSettled([getJSONOrNull('/v1/mirror'), getJSONOrNull('/v1/sources')]);
    this.showMirror(mirror);
    this.showSource(source);
  }

  showMirror(result) {
    const title = h('h2', { id: 'mirror-title' }, 'Mirror to the API server');
    if (result.status === 'rejected') {
      this.mirror.replaceChildren(title, h('p', { class: 'error' }, result.reason.message));
      return;
    }
    const m = result.value;
    if (!m) {
      this.mirror.replaceChildren(title, h('p', { class: 'muted' }, 'No API server is configured: nothing is mirrored.'));
      this.mirror.dataset.state = 'none';
      return;
    }
    const failing = m.lastError && (!m.lastSuccess || ms(m.lastError.time) > ms(m.lastSuccess));
    this.mirror.dataset.state = failing ? 'failing' : 'ok';
    this.mirror.replaceChildren(
      title,
      h(
        'dl',
        {},
        ...row('Server', m.server || (m.running ? '' : 'not running (read from the store)')),
        ...row('Leader', m.running ? (m.leader ? 'yes, this controller writes' : 'no, standing by') : 'no controller running'),
        ...row('Backlog', `${m.backlog} ${m.backlog === 1 ? 'entry' : 'entries'}${m.oldestEntry ? `, oldest queued ${ago(m.oldestEntry)}` : ''}`, { 'data-backlog': m.backlog }),
        ...row('Last success', ago(m.lastSuccess)),
        ...row('Last error', m.lastError ? `${ago(m.lastError.time)}: ${m.lastError.message}` : 'none', { class: failing ? 'bad' : '' }),
      ),
    );
  }

  showSource(result) {
    const title = h('h2', { id: 'source-title' }, 'Node source');
    if (result.status === 'rejected') {
      this.source.replaceChildren(title, h('p', { class: 'error' }, result.reason.message));
      return;
    }
    const src = result.value;
    if (!src) {
      this.source.replaceChildren(title, h('p', { class: 'muted' }, 'Static nodes (--nodes, --nodes-file): no cloud or inventory source to follow.'));
      this.source.dataset.state = 'none';
      return;
    }
    const failing = src.consecutiveFailures > 0;
    this.source.dataset.state = failing ? 'failing' : 'ok';
    this.source.replaceChildren(
      title,
      h(
        'dl',
        {},
        ...row('Source', src.source),
        ...row('Machines', String(src.machines)),
        ...row('Last sync', ago(src.lastSuccess)),
        ...row('Failures in a row', String(src.consecutiveFailures), { class: failing ? 'bad' : '' }),
        ...row('Last error', src.lastError ? `${ago(src.lastErrorTime)}: ${src.lastError}` : 'none', { class: failing ? 'bad' : '' }),
      ),
    );
  }
}
