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

/**
 * The security headers of every HTML page and redirect (the invite token travels in the URL).
 * The sign-in, invite and consent pages load the web app's stylesheet (/assets/app.css, so they
 * look like the app) and nothing else: no script at all, no inline style.
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
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

/**
 * The page layout of the pages one meets before the app (sign-in, sign-up, TOTP, invite, OAuth
 * consent, their notices): the app's top bar with its brand and one centred card, styled by the
 * app's stylesheet (`.gate` in /assets/app.css). No script; the CSP allows none.
 */
export function layout(title: string, body: SafeHtml): SafeHtml {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · Context Vault</title>
<link rel="stylesheet" href="/assets/app.css">
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="topbar"><nav class="nav" aria-label="Main"><a class="brand" href="/app">Context Vault</a></nav></header>
<main id="main" class="gate">
<div class="gate-card">
${body}
</div>
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
