// The web app's progressive enhancement (served as /assets/app.js, a module: CSP script-src 'self').
// Every page works without it; it only adds keyboard shortcuts:
//   /            focuses the search box in the navigation (Escape leaves it);
//   Ctrl/Cmd+K   opens "quick open": a dialog that finds pages by title as you type
//                (GET /api/v1/search?mode=fts&limit=8 with the session cookie; a GET needs no
//                CSRF header), arrow keys move, Enter opens the page (or, with none chosen, the
//                full search page), Escape closes.

import { apiHeaders } from './api.js';

/** True when the key press is meant for a text field, not for a shortcut. */
function typing(target) {
  if (!(target instanceof HTMLElement)) return false;
  const tag = target.tagName;
  return target.isContentEditable || tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT';
}

/** The app's address of a page path (each segment percent-encoded, as the server's pageUrl). */
const pageUrl = (path) => `/app/p/${path.split('/').map(encodeURIComponent).join('/')}`;

/** Waits this long after the last key before searching, so typing a word is one request. */
const DEBOUNCE_MS = 150;

let quick = null;

/** Builds the quick-open dialog once (DOM methods only: titles and paths are set as text). */
function quickOpen() {
  if (quick) return quick;
  const dialog = document.createElement('dialog');
  dialog.className = 'quick-open';
  dialog.setAttribute('aria-labelledby', 'qo-title');
  const form = document.createElement('form');
  form.method = 'get';
  form.action = '/app/search';
  form.setAttribute('role', 'search');
  form.setAttribute('aria-label', 'Quick open');
  const title = document.createElement('h2');
  title.id = 'qo-title';
  title.textContent = 'Open a page';
  const label = document.createElement('label');
  label.htmlFor = 'qo-input';
  label.className = 'visually-hidden';
  label.textContent = 'Page title';
  const input = document.createElement('input');
  Object.assign(input, { id: 'qo-input', name: 'q', type: 'search', autocomplete: 'off', maxLength: 4000, placeholder: 'Type a page title…' });
  input.setAttribute('role', 'combobox');
  input.setAttribute('aria-autocomplete', 'list');
  input.setAttribute('aria-expanded', 'false');
  input.setAttribute('aria-controls', 'qo-list');
  input.setAttribute('aria-describedby', 'qo-help');
  const list = document.createElement('ul');
  list.id = 'qo-list';
  list.className = 'qo-list';
  list.setAttribute('role', 'listbox');
  list.setAttribute('aria-label', 'Pages found');
  const status = document.createElement('p');
  status.className = 'qo-status muted';
  status.setAttribute('role', 'status');
  const help = document.createElement('p');
  help.id = 'qo-help';
  help.className = 'muted small';
  help.textContent = '↑ ↓ to choose, Enter to open, Esc to close.';
  form.append(title, label, input, list, status, help);
  dialog.append(form);
  document.body.append(dialog);

  let options = [];
  let active = -1;
  let timer = 0;
  let inflight = null;

  const setActive = (i) => {
    active = options.length ? (i + options.length) % options.length : -1;
    options.forEach((li, k) => li.setAttribute('aria-selected', k === active ? 'true' : 'false'));
    if (active >= 0) {
      input.setAttribute('aria-activedescendant', options[active].id);
      options[active].scrollIntoView({ block: 'nearest' });
    } else input.removeAttribute('aria-activedescendant');
  };

  const render = (results, q) => {
    list.replaceChildren();
    options = results.map((r, i) => {
      const li = document.createElement('li');
      li.id = `qo-opt-${i}`;
      li.className = 'qo-option';
      li.setAttribute('role', 'option');
      li.dataset.href = pageUrl(r.path);
      const t = document.createElement('span');
      t.className = 'qo-title';
      t.textContent = r.title;
      const p = document.createElement('span');
      p.className = 'qo-path muted mono';
      p.textContent = r.path;
      li.append(t, p);
      li.addEventListener('mousedown', (e) => e.preventDefault());
      li.addEventListener('click', () => location.assign(li.dataset.href));
      li.addEventListener('mousemove', () => active !== i && setActive(i));
      return li;
    });
    list.append(...options);
    input.setAttribute('aria-expanded', options.length ? 'true' : 'false');
    setActive(options.length ? 0 : -1);
    status.textContent =
      q === '' ? '' : options.length ? `${options.length} page${options.length === 1 ? '' : 's'} found.` : 'No page matches. Enter searches everywhere.';
  };

  const search = async () => {
    const q = input.value.trim();
    inflight?.abort();
    if (q === '') return render([], '');
    const ac = new AbortController();
    inflight = ac;
    try {
      const res = await fetch(`/api/v1/search?mode=fts&limit=8&q=${encodeURIComponent(q)}`, {
        headers: apiHeaders(),
        credentials: 'same-origin',
        signal: ac.signal,
      });
      if (res.status === 401) {
        render([], q);
        status.textContent = 'Your session has ended: sign in again.';
        return;
      }
      if (!res.ok) {
        render([], q);
        status.textContent = 'The search failed. Enter opens the full search page.';
        return;
      }
      const body = await res.json();
      if (inflight === ac) render(Array.isArray(body.results) ? body.results : [], q);
    } catch (e) {
      if (e?.name !== 'AbortError') status.textContent = 'The search failed. Enter opens the full search page.';
    }
  };

  input.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(search, DEBOUNCE_MS);
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      if (options.length) setActive(active + (e.key === 'ArrowDown' ? 1 : -1));
    } else if (e.key === 'Enter' && active >= 0) {
      // A chosen page opens; with none chosen the form goes to the full search page.
      e.preventDefault();
      location.assign(options[active].dataset.href);
    }
  });
  // A click on the backdrop (outside the form) closes, as Escape does.
  dialog.addEventListener('click', (e) => {
    if (e.target === dialog) dialog.close();
  });

  quick = { dialog, input };
  return quick;
}

document.addEventListener('keydown', (event) => {
  if (event.defaultPrevented) return;
  if ((event.ctrlKey || event.metaKey) && !event.altKey && !event.shiftKey && event.key.toLowerCase() === 'k') {
    // Only for a signed-in page (the navigation's search box is there).
    if (!document.getElementById('q')) return;
    event.preventDefault();
    const { dialog, input } = quickOpen();
    if (!dialog.open) dialog.showModal();
    input.focus();
    input.select();
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  // `/` focuses the search box (as on many sites); Escape leaves it.
  if (event.key === '/' && !typing(event.target)) {
    const box = document.getElementById('q');
    if (box instanceof HTMLInputElement) {
      event.preventDefault();
      box.focus();
      box.select();
    }
  } else if (event.key === 'Escape' && event.target instanceof HTMLInputElement && event.target.id === 'q') {
    event.target.blur();
  }
});
