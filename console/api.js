// Talking to the API: bearer token (kept for the tab), JSON reads, and the
// node watch that resumes from the last resourceVersion it saw.

const TOKEN_KEY = 'nodekeeper.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** A failed API call: the HTTP status and the Status message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let asking = null;

/** Opens the token dialog (once, however many requests wait on it). */
export function askForToken(reason) {
  if (asking) return asking;
  const dialog = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const why = document.getElementById('token-why');
  asking = new Promise((resolve) => {
    why.textContent = reason;
    input.value = '';
    const done = (event) => {
      event.preventDefault();
      setToken(input.value.trim());
      form.removeEventListener('submit', done);
      dialog.close();
      asking = null;
      resolve();
    };
    form.addEventListener('submit', done);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

/** How long a read may take; the watch, which runs for long, passes its own signal. */
const READ_TIMEOUT_MS = 60_000;

/** fetch with the token; a 401 asks for a token and tries again. */
export async function request(path, { signal } = {}) {
  // Bounded: each round needs a new token from the user.
  for (let round = 0; round < 20; round++) {
    const headers = { Accept: 'application/json' };
    const bearer = token();
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    const response = await fetch(path, { headers, signal: signal ?? AbortSignal.timeout(READ_TIMEOUT_MS), cache: 'no-store' });
    if (response.status !== 401) return response;
    await askForToken(
      bearer
        ? 'The server refused that token. Enter a token from its --token-file.'
        : 'This server needs a bearer token (it runs with --token-file). Enter one of its tokens.',
    );
  }
  throw new ApiError(401, 'no accepted token');
}

async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body?.message) message = body.message;
  } catch {
    // Not a Status: keep the HTTP status line.
  }
  return new ApiError(response.status, message);
}

/** GET a JSON document; an ApiError when the answer is not 2xx. */
export async function getJSON(path, options) {
  return (await getJSONAndHeaders(path, options)).body;
}

/** GET a JSON document and the answer's headers; an ApiError when it is not 2xx. */
export async function getJSONAndHeaders(path, options) {
  const response = await request(path, options);
  if (!response.ok) throw await failure(response);
  return { body: await response.json(), headers: response.headers };
}

/** GET a JSON document, or null on 404. */
export async function getJSONOrNull(path, options) {
  const response = await request(path, options);
  if (response.status === 404) return null;
  if (!response.ok) throw await failure(response);
  return response.json();
}

/** Every event of `/v1/history` matching `query`, read in pages. */
export async function history(query, { after = 0, signal } = {}) {
  const page = 5000;
  const events = [];
  // Each round moves `after` forward or stops.
  for (;;) {
    const params = new URLSearchParams(query);
    params.set('after', String(after));
    params.set('limit', String(page));
    const batch = await getJSON(`/v1/history?${params}`, { signal });
    events.push(...batch);
    if (batch.length < page) return events;
    after = batch[batch.length - 1].seq;
  }
}

const sleep = (millis) => new Promise((resolve) => setTimeout(resolve, millis));

/**
 * Follows `GET /api/v1/nodes?watch=true` from `resourceVersion`. Events
 * arrive in batches (one per chunk read); when the stream ends or breaks it
 * is opened again from the last resourceVersion seen. A 410 (the version is
 * no longer kept) calls `onExpired`, which should list again.
 */
export class NodeWatch {
  constructor({ resourceVersion, fieldSelector = '', onEvents, onState, onExpired }) {
    this.resourceVersion = String(resourceVersion);
    this.fieldSelector = fieldSelector;
    this.onEvents = onEvents;
    this.onState = onState || (() => {});
    this.onExpired = onExpired || (() => {});
    this.controller = new AbortController();
    this.stopped = false;
    this.run();
  }

  stop() {
    this.stopped = true;
    this.controller.abort();
  }

  url() {
    const params = new URLSearchParams({
      watch: 'true',
      allowWatchBookmarks: 'true',
      resourceVersion: this.resourceVersion,
    });
    if (this.fieldSelector) params.set('fieldSelector', this.fieldSelector);
    return `/api/v1/nodes?${params}`;
  }

  async run() {
    let backoff = 250;
    while (!this.stopped) {
      try {
        const response = await request(this.url(), { signal: this.controller.signal });
        if (response.status === 410) {
          this.stopped = true;
          this.onExpired();
          return;
        }
        if (!response.ok) throw await failure(response);
        this.onState('live', this.resourceVersion);
        backoff = 250;
        if (await this.read(response)) return;
      } catch (error) {
        if (this.stopped) return;
        this.onState('reconnecting', this.resourceVersion, error.message);
      }
      if (this.stopped) return;
      this.onState('reconnecting', this.resourceVersion);
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 5000);
    }
  }

  /** Reads one stream to its end; true when the watch must stop. */
  async read(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split('\n');
      buffer = lines.pop();
      const batch = [];
      for (const line of lines) {
        if (!line.trim()) continue;
        const event = JSON.parse(line);
        if (event.type === 'ERROR') {
          if (event.object?.code === 410) {
            this.stopped = true;
            this.onExpired();
            return true;
          }
          throw new ApiError(event.object?.code || 500, event.object?.message || 'watch error');
        }
        const version = event.object?.metadata?.resourceVersion;
        if (version) this.resourceVersion = version;
        if (event.type !== 'BOOKMARK') batch.push(event);
      }
      this.onEvents(batch, this.resourceVersion);
    }
  }
}
