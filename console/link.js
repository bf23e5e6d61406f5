// What a page shows, kept in its URL, so that a link shows what its sender
// saw and the back button steps back through it: the overview's filters
// (on /ui/ and on /ui/at/{time} alike).
//
//   ?name=edge-1&labels=tier%3Dgold&hide=True,Unknown

import { STATUSES } from './dom.js';

/** The filters a URL's query names: a name, a label selector, the statuses hidden. */
export function filtersOf(search) {
  const params = new URLSearchParams(search);
  const hide = (params.get('hide') || '').split(',').filter((s) => STATUSES.includes(s));
  return { name: params.get('name') || '', labels: params.get('labels') || '', hide };
}

/** The query naming `filters` ('' for none), other parameters of `search` kept. */
export function searchOf(filters, search) {
  const params = new URLSearchParams(search);
  const hide = STATUSES.filter((s) => filters.hide.includes(s)).join(',');
  for (const [key, value] of [['name', filters.name], ['labels', filters.labels], ['hide', hide]]) {
    if (value) params.set(key, value);
    else params.delete(key);
  }
  const text = params.toString();
  return text ? `?${text}` : '';
}

/**
 * Puts `filters` in the address bar: as a new entry for the back button
 * when `push`, else in place of the current one (the keystrokes after the
 * first in a field).
 */
export function keepInURL(filters, { push }) {
  const search = searchOf(filters, location.search);
  if (search === location.search) return;
  const url = `${location.pathname}${search}${location.hash}`;
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}
