import type { FastifyReply } from 'fastify';

/**
 * A tiny HTML template helper: `html\`<p>${value}</p>\`` escapes every interpolated value
 * unless it is itself the result of `html` (already safe). Arrays are rendered item by item;
 * null, undefined and false render nothing. There is no other way to put text into a page.
 */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** Escapes text for an element body or a quoted attribute value. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

function render(v: unknown): string {
  if (v instanceof SafeHtml) return v.value;
  if (v === null || v === undefined || v === false) return '';
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return new SafeHtml(out);
}

/** The security headers of every HTML page and redirect (the invite token travels in the URL). */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
};

export function setPageHeaders(reply: FastifyReply): void {
  for (const [k, v] of Object.entries(PAGE_HEADERS)) reply.header(k, v);
}

/**
 * The headers of the web app's pages (/app, issue 17): as PAGE_HEADERS, but the app loads its
 * own stylesheet and small script modules from /assets (`'self'`, never inline, never another
 * origin) and shows images of this site or inline `data:` ones.
 */
export const APP_PAGE_HEADERS: Readonly<Record<string, string>> = {
  ...PAGE_HEADERS,
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
};

export function setAppPageHeaders(reply: FastifyReply): void {
  for (const [k, v] of Object.entries(APP_PAGE_HEADERS)) reply.header(k, v);
}

const STYLE = `
:root { color-scheme: light dark; --fg: #1d2330; --muted: #5b6475; --bg: #f4f5f8; --card: #fff; --line: #d5d9e2;
  --accent: #2f5bd3; --accent-fg: #fff; --err-bg: #fdecec; --err-fg: #8a1c1c; --ok-bg: #e8f5ec; --ok-fg: #1d5a32; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e8ee; --muted: #a3abbb; --bg: #14171d; --card: #1d2129; --line: #353b48;
    --accent: #7c9dff; --accent-fg: #0e1116; --err-bg: #3a1d1f; --err-fg: #ffb4b4; --ok-bg: #18301f; --ok-fg: #a8e6b8; }
}
* { box-sizing: border-box; }
body { margin: 0; min-height: 100vh; display: flex; align-items: center; justify-content: center; padding: 1.5rem;
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
main { width: 100%; max-width: 26rem; background: var(--card); border: 1px solid var(--line); border-radius: 12px;
  padding: 2rem; box-shadow: 0 2px 12px rgba(0,0,0,.06); }
.brand { margin: 0 0 1.25rem; font-size: .85rem; letter-spacing: .06em; text-transform: uppercase; color: var(--muted); }
h1 { margin: 0 0 1rem; font-size: 1.4rem; line-height: 1.3; }
h2 { margin: 0 0 1rem; font-size: 1.05rem; }
p, form { margin: 0 0 1rem; }
main > :last-child { margin-bottom: 0; }
label, p.label { display: block; margin: 0 0 .35rem; font-weight: 600; font-size: .95rem; }
input[type=email], input[type=password], input[type=text], select { display: block; width: 100%; margin: 0 0 1rem; padding: .6rem .7rem;
  font: inherit; color: inherit; background: transparent; border: 1px solid var(--line); border-radius: 8px; }
input:focus-visible, button:focus-visible, a:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
input.code { font-size: 1.5rem; letter-spacing: .4em; text-align: center; font-variant-numeric: tabular-nums; }
button { width: 100%; padding: .65rem 1rem; font: inherit; font-weight: 600; color: var(--accent-fg); background: var(--accent);
  border: 0; border-radius: 8px; cursor: pointer; }
button.secondary { color: var(--fg); background: transparent; border: 1px solid var(--line); }
a { color: var(--accent); }
.alert { padding: .7rem .9rem; border-radius: 8px; background: var(--err-bg); color: var(--err-fg); }
.ok { padding: .7rem .9rem; border-radius: 8px; background: var(--ok-bg); color: var(--ok-fg); }
.muted { color: var(--muted); font-size: .92rem; }
code, .secret { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .88rem; word-break: break-all; }
.secret { display: block; padding: .6rem .7rem; margin: 0 0 1rem; border: 1px dashed var(--line); border-radius: 8px; user-select: all; }
hr { border: 0; border-top: 1px solid var(--line); margin: 1.5rem 0; }
`;

/** The page layout: one centred card, no scripts, inline styles only (the CSP allows nothing else). */
export function layout(title: string, body: SafeHtml): SafeHtml {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · Context Vault</title>
<style>${new SafeHtml(STYLE)}</style>
</head>
<body>
<main>
<p class="brand">Context Vault</p>
${body}
</main>
</body>
</html>
`;
}

/**
 * Sends a page with its status and the security headers. `formTargets`: origins a form on the
 * page may end up at besides this site (CSP form-action also governs the redirect that answers
 * a submission, so the OAuth consent form names the client's redirect origin).
 */
export function sendPage(reply: FastifyReply, status: number, title: string, body: SafeHtml, formTargets: string[] = []): FastifyReply {
  setPageHeaders(reply);
  if (formTargets.length > 0) {
    reply.header(
      'content-security-policy',
      PAGE_HEADERS['content-security-policy']!.replace("form-action 'self'", `form-action 'self' ${formTargets.join(' ')}`),
    );
  }
  return reply.code(status).type('text/html; charset=utf-8').send(layout(title, body).value);
}

/** A heading, one message (announced as an alert) and a row of links: every notice and error page. */
export function messageBody(title: string, message: string, links: { href: string; text: string }[] = []): SafeHtml {
  return html`<h1>${title}</h1>
<p role="alert">${message}</p>
${links.length ? html`<p>${links.map((l, i) => html`${i ? html` · ` : ''}<a href="${l.href}">${l.text}</a>`)}</p>` : ''}`;
}
