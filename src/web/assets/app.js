// The web app's progressive enhancement (served as /assets/app.js, a module: CSP script-src 'self').
// Every page works without it; it only adds keyboard shortcuts.

/** True when the key press is meant for a text field, not for a shortcut. */
function typing(target) {
  if (!(target instanceof HTMLElement)) return false;
  const tag = target.tagName;
  return target.isContentEditable || tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT';
}

document.addEventListener('keydown', (event) => {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
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
