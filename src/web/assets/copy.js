// Copy buttons for secrets shown once (agent keys, git tokens, invite links, MCP client
// configurations). Served as /assets/copy.js (a module: CSP script-src 'self'). Without
// JavaScript the buttons stay hidden and the text stays selectable; with it, each
// `<button data-copy="<id>">` appears and copies the text of the element with that id.

function announce(button, text) {
  const label = button.dataset.label ?? button.textContent;
  button.dataset.label = label;
  button.textContent = text;
  setTimeout(() => {
    button.textContent = label;
  }, 2000);
}

function selectText(el) {
  const range = document.createRange();
  range.selectNodeContents(el);
  const sel = window.getSelection();
  sel?.removeAllRanges();
  sel?.addRange(range);
}

for (const button of document.querySelectorAll('button[data-copy]')) {
  const target = document.getElementById(button.dataset.copy ?? '');
  if (!target) continue;
  button.hidden = false;
  button.setAttribute('aria-live', 'polite');
  button.addEventListener('click', async () => {
    const text = target.textContent ?? '';
    try {
      await navigator.clipboard.writeText(text);
      announce(button, 'Copied');
    } catch {
      // No clipboard permission (an insecure origin, an old browser): select it for Ctrl+C.
      selectText(target);
      announce(button, 'Selected: press Ctrl+C');
    }
  });
}
