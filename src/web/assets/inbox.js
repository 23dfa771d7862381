// Live inbox (served as /assets/inbox.js, a module: CSP script-src 'self'). On /app/inbox it
// long-polls GET /api/v1/inbox?after=<seq>&wait=25 with the session cookie; when events arrive
// it fetches them as list items from /app/inbox/items (the server renders every event, here and
// on the page) and puts them on top of the Unread list, with the counts in the page and in the
// navigation's "Inbox (n)" kept current. Without it, the page is current as of its last load.

import { apiHeaders } from './api.js';

const list = document.getElementById('inbox-unread');
const WAIT_S = 25;
/** A poll that answers at once is not repeated sooner than this (a server that ignores wait). */
const MIN_GAP_MS = 1000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The navigation's count and the page's summary, from the unread items on the page. */
function updateCounts(added) {
  const nav = document.querySelector('[data-inbox-count]');
  if (nav) {
    const was = nav.dataset.inboxCount ?? '0';
    const capped = was.endsWith('+');
    const n = (Number.parseInt(was, 10) || 0) + added;
    const text = `${n}${capped ? '+' : ''}`;
    nav.dataset.inboxCount = text;
    nav.textContent = `(${text})`;
    nav.classList.toggle('count-some', n > 0);
  }
  const items = list.querySelectorAll('li.event').length;
  const summary = document.getElementById('inbox-summary');
  if (summary) summary.textContent = items === 0 ? 'No unread events.' : `${items} unread event${items === 1 ? '' : 's'}.`;
  const empty = document.getElementById('inbox-empty');
  if (empty) empty.hidden = items > 0;
  document.title = document.title.replace(/^Inbox( \(\d+\))?/, items ? `Inbox (${items})` : 'Inbox');
}

/** Puts the unread events after `after` on top of the list; answers how many were new here. */
async function insertAfter(after, upTo) {
  const res = await fetch(`/app/inbox/items?after=${after}`, { headers: { accept: 'text/html' }, credentials: 'same-origin', cache: 'no-store' });
  if (!res.ok) return 0;
  const tpl = document.createElement('template');
  tpl.innerHTML = await res.text();
  const fresh = [...tpl.content.querySelectorAll('li.event')].filter((li) => !document.getElementById(li.id));
  // The items come newest first: keep that order above the older ones.
  list.prepend(...fresh);
  for (const li of fresh) li.classList.add('event-arrived');
  const ackAll = document.getElementById('ack-all');
  if (ackAll && fresh.length) {
    const field = ackAll.querySelector('input[name="up_to"]');
    if (field) field.value = String(Math.max(Number(field.value) || 0, upTo));
    ackAll.hidden = false;
  }
  if (fresh.length) {
    const live = document.getElementById('inbox-live');
    const first = fresh[0].querySelector('.event-what');
    if (live) live.textContent = `${fresh.length} new: ${first ? first.textContent.trim() : ''}`;
  }
  return fresh.length;
}

async function run() {
  let after = Number(list.dataset.after) || 0;
  let failures = 0;
  for (;;) {
    const started = Date.now();
    let res;
    try {
      res = await fetch(`/api/v1/inbox?after=${after}&wait=${WAIT_S}`, {
        headers: apiHeaders(),
        credentials: 'same-origin',
        cache: 'no-store',
      });
    } catch {
      res = null;
    }
    if (res && (res.status === 401 || res.status === 403)) {
      const live = document.getElementById('inbox-live');
      if (live) live.textContent = 'Live updates stopped: sign in again to see new events.';
      return;
    }
    if (!res || !res.ok) {
      failures++;
      await sleep(Math.min(30_000, 1000 * 2 ** failures));
      continue;
    }
    failures = 0;
    const body = await res.json();
    const events = Array.isArray(body.events) ? body.events : [];
    const next = typeof body.next_after === 'number' ? body.next_after : after;
    if (events.length) {
      const top = Math.max(...events.map((e) => e.seq));
      const added = await insertAfter(after, top);
      updateCounts(added);
    }
    after = Math.max(after, next);
    const gap = MIN_GAP_MS - (Date.now() - started);
    if (gap > 0) await sleep(gap);
  }
}

if (list) void run();
