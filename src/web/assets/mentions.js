// Mentions autocomplete for the discussion's message boxes (served as /assets/mentions.js, a module:
// CSP script-src 'self'). Without it, typing @name in the text still mentions: the server finds
// the names. With it, typing @ offers the workspace's people and agents (GET /api/v1/principals,
// with the session cookie) in a listbox: arrow keys move, Enter or Tab picks, Escape closes.
// A picked principal's id is also sent as a `mentions` field, so a name that two people share
// still reaches the one picked.

import { apiHeaders } from './api.js';

const MAX_OPTIONS = 8;
let people = null;

/** The workspace's principals that can be mentioned (loaded once, on the first @). */
async function loadPeople() {
  if (people) return people;
  try {
    const res = await fetch('/api/v1/principals', { headers: apiHeaders(), credentials: 'same-origin' });
    if (!res.ok) return [];
    const body = await res.json();
    people = (body.principals ?? []).filter((x) => typeof x.id === 'string' && typeof x.name === 'string' && !x.suspended_at);
  } catch {
    return [];
  }
  return people;
}

const fold = (s) => s.normalize('NFC').toLowerCase();

/** The `@query` being typed just before the caret, or null: an @ at the start or after a character that cannot end a word. */
function activeQuery(box) {
  const caret = box.selectionStart;
  if (caret !== box.selectionEnd) return null;
  const before = box.value.slice(0, caret);
  const at = before.lastIndexOf('@');
  if (at < 0) return null;
  if (at > 0 && /[\p{L}\p{N}_.@]/u.test(before[at - 1])) return null;
  const query = before.slice(at + 1);
  if (query.length > 40 || /[\n@]/.test(query)) return null;
  return { at, query };
}

let uid = 0;

function enhance(box) {
  const form = box.form;
  const self = box.dataset.self ?? '';
  const n = ++uid;
  const list = document.createElement('ul');
  list.id = `mention-list-${n}`;
  list.className = 'mention-list';
  list.setAttribute('role', 'listbox');
  list.setAttribute('aria-label', 'People and agents to mention');
  list.hidden = true;
  const status = document.createElement('p');
  status.className = 'visually-hidden';
  status.setAttribute('role', 'status');
  box.after(list, status);
  box.setAttribute('aria-autocomplete', 'list');
  box.setAttribute('aria-controls', list.id);

  /** Names picked from the list, by their @text: their ids go with the form. */
  const picked = new Map();
  let options = [];
  let active = -1;
  let query = null;

  function close() {
    list.hidden = true;
    list.replaceChildren();
    options = [];
    active = -1;
    query = null;
    box.removeAttribute('aria-activedescendant');
  }

  function highlight(i) {
    active = i;
    [...list.children].forEach((li, k) => li.setAttribute('aria-selected', String(k === i)));
    if (i >= 0) {
      box.setAttribute('aria-activedescendant', list.children[i].id);
      list.children[i].scrollIntoView({ block: 'nearest' });
    } else box.removeAttribute('aria-activedescendant');
  }

  function pick(i) {
    const who = options[i];
    if (!who || !query) return;
    const text = `@${who.name}`;
    const start = query.at;
    const end = box.selectionStart;
    box.setRangeText(`${text} `, start, end, 'end');
    picked.set(fold(text), who.id);
    close();
    status.textContent = `${who.name} will be mentioned.`;
    box.focus();
  }

  async function update() {
    const q = activeQuery(box);
    if (!q) return close();
    const all = await loadPeople();
    // The box may have changed while the list loaded.
    const now = activeQuery(box);
    if (!now || now.at !== q.at || now.query !== q.query) return;
    const f = fold(q.query);
    const hits = all
      .filter((x) => x.id !== self)
      .filter((x) => fold(x.name).startsWith(f) || (f.length > 0 && fold(x.name).includes(f)))
      .sort((a, b) => Number(!fold(a.name).startsWith(f)) - Number(!fold(b.name).startsWith(f)) || a.name.localeCompare(b.name))
      .slice(0, MAX_OPTIONS);
    if (hits.length === 0) return close();
    query = q;
    options = hits;
    list.replaceChildren(
      ...hits.map((x, i) => {
        const li = document.createElement('li');
        li.id = `${list.id}-${i}`;
        li.setAttribute('role', 'option');
        li.setAttribute('aria-selected', 'false');
        li.append(x.name);
        if (x.kind === 'agent') {
          const tag = document.createElement('span');
          tag.className = 'badge badge-agent';
          tag.textContent = 'agent';
          li.append(' ', tag);
        }
        // mousedown: pick before the box loses focus.
        li.addEventListener('mousedown', (e) => {
          e.preventDefault();
          pick(i);
        });
        return li;
      }),
    );
    list.hidden = false;
    highlight(0);
    status.textContent = `${hits.length} suggestion${hits.length === 1 ? '' : 's'}: up and down arrows to choose, Enter to pick.`;
  }

  box.addEventListener('input', () => void update());
  box.addEventListener('click', () => void update());
  box.addEventListener('blur', () => setTimeout(close, 150));
  box.addEventListener('keydown', (e) => {
    if (list.hidden || options.length === 0) return;
    if (e.key === 'ArrowDown') {
      e.preventDefault();
      highlight((active + 1) % options.length);
    } else if (e.key === 'ArrowUp') {
      e.preventDefault();
      highlight((active - 1 + options.length) % options.length);
    } else if (e.key === 'Enter' || e.key === 'Tab') {
      if (active < 0) return;
      e.preventDefault();
      pick(active);
    } else if (e.key === 'Escape') {
      e.preventDefault();
      close();
    }
  });

  // The ids of the names picked that are still in the text go with the message.
  form?.addEventListener('submit', () => {
    for (const old of form.querySelectorAll('input[data-mention-id]')) old.remove();
    const text = fold(box.value);
    for (const [name, id] of picked) {
      if (!text.includes(name)) continue;
      const input = document.createElement('input');
      input.type = 'hidden';
      input.name = 'mentions';
      input.value = id;
      input.dataset.mentionId = '';
      form.append(input);
    }
  });
}

for (const box of document.querySelectorAll('textarea[data-mentions]')) enhance(box);
