// Shared by the browser tests and the render benchmark: Debian's chromium
// driven by playwright-core, offline, with a fresh profile per run.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { inflateSync } from 'node:zlib';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.NODEKEEPER_CHROMIUM || '/usr/bin/chromium';

/** Launches headless chromium; close it with `close()` (it removes the profile). */
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'nodekeeper-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 900 },
    timeout: 60_000,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** A page that fails the test on any uncaught error or console error. */
export async function newPage(context, errors) {
  const page = await context.newPage();
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // /v1/mirror and /v1/sources answer 404 when nothing is configured: expected.
    if (m.type() === 'error' && !m.text().includes('status of 404')) errors.push(`console error: ${m.text()}`);
  });
  // Nothing may leave loopback.
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (url.protocol === 'data:' || url.protocol === 'blob:') return;
    if (!url.hostname.startsWith('127.') && url.hostname !== 'localhost') {
      errors.push(`request outside loopback: ${r.url()}`);
    }
  });
  return page;
}

/** Runs the nodekeeper CLI and returns its stdout. */
export function cli(bin, db, args) {
  return execFileSync(bin, ['--db', db, ...args], { encoding: 'utf8', maxBuffer: 256 << 20 });
}

export async function getJSON(url, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch(url, { headers });
  if (!response.ok) throw new Error(`GET ${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

export function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

export function assertEqual(actual, expected, message) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${message}\n  expected: ${e.slice(0, 2000)}\n  actual:   ${a.slice(0, 2000)}`);
}

/** The (name, ready) pairs of the overview's tiles, by name. */
export async function tiles(page) {
  return page.$$eval('[data-node]', (els) =>
    els.map((el) => [el.dataset.node, el.dataset.ready]).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)),
  );
}

/** The (name, ready) pairs of a Kubernetes NodeList. */
export function readyPairs(list) {
  return list.items
    .map((n) => {
      const ready = (n.status?.conditions || []).find((c) => c.type === 'Ready');
      return [n.metadata.name, ready ? ready.status : 'Unknown'];
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

/**
 * The colour [r, g, b] on screen at (x, y) of the page's viewport, read from a
 * one-pixel screenshot. With one pixel every PNG filter leaves the bytes
 * as they are, so the first scanline after its filter byte is the pixel.
 */
export async function pixelAt(page, x, y) {
  const png = await page.screenshot({ clip: { x: Math.round(x), y: Math.round(y), width: 1, height: 1 } });
  let at = 8;
  let header = null;
  const data = [];
  while (at < png.length) {
    const length = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const body = png.subarray(at + 8, at + 8 + length);
    if (type === 'IHDR') header = { depth: body[8], colour: body[9] };
    if (type === 'IDAT') data.push(body);
    at += 12 + length;
  }
  assert(header && header.depth === 8 && (header.colour === 2 || header.colour === 6), `a PNG of 8-bit RGB(A): ${JSON.stringify(header)}`);
  const raw = inflateSync(Buffer.concat(data));
  return [raw[1], raw[2], raw[3]];
}

/** A CSS colour as [r, g, b], as the page computes it. */
export async function cssColour(page, css) {
  return page.evaluate((value) => {
    const probe = document.createElement('span');
    probe.style.color = value;
    document.body.append(probe);
    const rgb = getComputedStyle(probe).color.match(/[\d.]+/g).slice(0, 3).map(Number);
    probe.remove();
    return rgb;
  }, css);
}

/** Whether two colours are the same, to within rounding. */
export function sameColour(a, b) {
  return a.every((v, i) => Math.abs(v - b[i]) <= 3);
}
