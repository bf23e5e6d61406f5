// Small DOM and time helpers shared by the console's modules.

export const SVG_NS = 'http://www.w3.org/2000/svg';

/** An element: h('a', {href: '/ui/', class: 'x'}, 'text', child). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** An SVG element with attributes. */
export function s(tag, attrs = {}) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

/** Escapes text for an HTML string (attribute or content). */
export function esc(text) {
  return String(text)
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

/** The human word for a Ready status. */
export function readyWord(status) {
  return status === 'True' ? 'Ready' : status === 'False' ? 'NotReady' : 'Unknown';
}

export const STATUSES = ['True', 'False', 'Unknown'];

/** A Ready status with its word: 'True (Ready)', 'False (NotReady)', 'Unknown'. */
export function readyText(status) {
  return status === 'Unknown' ? status : `${status} (${readyWord(status)})`;
}

/** A node's Ready condition from its Kubernetes JSON, or undefined. */
export function readyCondition(node) {
  return (node.status?.conditions || []).find((c) => c.type === 'Ready');
}

/** A node's Ready status from its Kubernetes JSON ('Unknown' without one). */
export function readyOf(node) {
  const ready = readyCondition(node);
  return ready && STATUSES.includes(ready.status) ? ready.status : 'Unknown';
}

export const ZONE_LABELS = ['topology.kubernetes.io/zone', 'failure-domain.beta.kubernetes.io/zone'];
export const NO_ZONE = '(no zone)';

export function zoneOf(labels) {
  for (const key of ZONE_LABELS) if (labels?.[key]) return labels[key];
  return NO_ZONE;
}

/** Milliseconds since the epoch of an RFC 3339 time (microseconds are dropped). */
export function ms(time) {
  return Date.parse(time);
}

/** RFC 3339 in UTC, to the second unless the time has a fraction. */
export function rfc3339(millis) {
  const text = new Date(millis).toISOString();
  return text.endsWith('.000Z') ? text.slice(0, -5) + 'Z' : text;
}

/** A time as operators read it: UTC, to the second. */
export function showTime(time) {
  if (!time) return '';
  const d = typeof time === 'number' ? new Date(time) : new Date(Date.parse(time));
  if (Number.isNaN(d.getTime())) return String(time);
  return d.toISOString().slice(0, 19).replace('T', ' ') + 'Z';
}

/** A duration in the largest sensible units: 3d4h, 5m10s, 800ms. */
export function showDuration(millis) {
  if (!Number.isFinite(millis)) return '';
  if (millis < 1000) return `${Math.max(0, Math.round(millis))}ms`;
  let secs = Math.floor(millis / 1000);
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    if (secs >= size || (unit === 's' && parts.length === 0)) {
      parts.push(`${Math.floor(secs / size)}${unit}`);
      secs %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join('');
}

/** Runs `f` at most once per `wait` ms, the last call winning. */
export function debounce(f, wait) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => f(...args), wait);
  };
}

/** Shows the shared tooltip next to `target` (hover and keyboard focus alike). */
export function showTip(target, lines) {
  const tip = document.getElementById('tip');
  if (!tip) return;
  tip.replaceChildren(...lines.map((line, i) => h(i === 0 ? 'strong' : 'div', {}, line)));
  tip.hidden = false;
  const box = target.getBoundingClientRect();
  const width = tip.offsetWidth;
  const left = Math.min(Math.max(8, box.left + box.width / 2 - width / 2), window.innerWidth - width - 8);
  const below = box.bottom + 8 + tip.offsetHeight < window.innerHeight;
  tip.style.left = `${left + window.scrollX}px`;
  tip.style.top = `${(below ? box.bottom + 6 : box.top - tip.offsetHeight - 6) + window.scrollY}px`;
}

export function hideTip() {
  const tip = document.getElementById('tip');
  if (tip) tip.hidden = true;
}
