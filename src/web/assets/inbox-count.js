// The navigation's live "Inbox (n)" (served as /assets/inbox-count.js, a module: CSP script-src
// 'self'), on every app page but the inbox itself, whose own /assets/inbox.js keeps the count
// there (so a tab holds one long-poll). It long-polls GET /api/v1/inbox?after=<seq>&wait=25 with
// the session cookie; when events arrive it asks /app/inbox/count for the count the server
// renders (the same rule as the page's), and puts it in [data-inbox-count]. It backs off on
// errors and stops when the session is gone. It polls only while the tab is visible: a browser
// holds about six connections to a host, and a long-poll in every background tab would leave
// none for loading pages; back in view, it asks for the count first. Without it, the count is
// as of the page's load.

import { apiHeaders } from './api.js';

const WAIT_S = 25;
/** A poll that answers at once is not repeated sooner than this (a server that ignores wait). */
const MIN_GAP_MS = 1000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Signed out: the count's request was sent to the login page, or the API said 401/403. */
class SignedOut extends Error {}

function show(nav, count, capped) {
  const text = `${count}${capped ? '+' : ''}`;
  if (nav.dataset.inboxCount === text) return;
  nav.dataset.inboxCount = text;
  nav.textContent = `(${text})`;
  nav.classList.toggle('count-some', count > 0);
}

/** The server's count and the seq to wait after; null on a failure worth retrying. */
async function refresh(nav) {
  let res;
  try {
    res = await fetch('/app/inbox/count', { headers: { accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store', redirect: 'manual' });
  } catch {
    return null;
  }
  // The app sends a signed-out person to /login (a redirect we do not follow).
  if (res.type === 'opaqueredirect' || res.status === 401 || res.status === 403) throw new SignedOut();
  if (!res.ok) return null;
  const body = await res.json().catch(() => null);
  if (!body || typeof body.count !== 'number' || typeof body.after !== 'number') return null;
  show(nav, body.count, body.capped === true);
  return body.after;
}

const visible = () => document.visibilityState === 'visible';
/** Ends the wait for the tab to be seen again. */
let wake = null;
/** The long-poll in flight, aborted when the tab is hidden. */
let inflight = null;
document.addEventListener('visibilitychange', () => {
  if (visible()) {
    wake?.();
    wake = null;
  } else inflight?.abort();
});
/** Resolves true once a hidden tab is visible again, false at once for a visible one. */
const whenVisible = () => (visible() ? Promise.resolve(false) : new Promise((resolve) => (wake = () => resolve(true))));

async function run(nav) {
  let after = null;
  let failures = 0;
  const backOff = () => sleep(Math.min(60_000, 1000 * 2 ** ++failures));
  for (;;) {
    // Hidden meanwhile: events may have come and been read, so the count is asked for again.
    if (await whenVisible()) after = null;
    if (after === null) {
      after = await refresh(nav);
      if (after === null) {
        await backOff();
        continue;
      }
    }
    const started = Date.now();
    const ac = new AbortController();
    inflight = ac;
    let res;
    try {
      res = await fetch(`/api/v1/inbox?after=${after}&wait=${WAIT_S}&limit=1`, {
        headers: apiHeaders(),
        credentials: 'same-origin',
        cache: 'no-store',
        signal: ac.signal,
      });
    } catch {
      res = null;
    } finally {
      inflight = null;
    }
    // Stopped because the tab was hidden: not a failure.
    if (ac.signal.aborted) continue;
    if (res && (res.status === 401 || res.status === 403)) throw new SignedOut();
    if (!res || !res.ok) {
      await backOff();
      continue;
    }
    failures = 0;
    const body = await res.json().catch(() => ({}));
    // Something arrived: the count is the server's again (events can also have been read elsewhere).
    if (Array.isArray(body.events) && body.events.length > 0) after = null;
    else if (typeof body.next_after === 'number') after = Math.max(after, body.next_after);
    const gap = MIN_GAP_MS - (Date.now() - started);
    if (gap > 0) await sleep(gap);
  }
}

const nav = document.querySelector('[data-inbox-count]');
if (nav instanceof HTMLElement && !document.getElementById('inbox-unread')) {
  run(nav).catch((e) => {
    if (!(e instanceof SignedOut)) throw e;
  });
}
