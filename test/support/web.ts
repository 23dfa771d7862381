import type { Browser } from 'playwright-core';
import { openPage } from './browser.js';
import { Client } from './server.js';

/** The password every web test person signs up with. */
export const WEB_PASSWORD = 'correct horse battery';

let counter = 0;
export const freshEmail = (name: string) => `${name.toLowerCase().replace(/[^a-z]/g, '') || 'user'}-${process.pid}-${++counter}-${Date.now()}@example.com`;

export interface WebPerson {
  client: Client;
  email: string;
  id: string;
  slug: string;
  /** The workspace the sign-up made (or the invite's). */
  workspace: { id: string; slug: string; name: string };
}

/** Signs a person up through the JSON API (with an invite: they join that workspace, and sign-in lands in it). */
export async function webPerson(base: string, name: string, inviteToken?: string): Promise<WebPerson> {
  const client = new Client(base);
  const email = freshEmail(name);
  const res = await client.post('/api/v1/auth/signup', { email, password: WEB_PASSWORD, name, ...(inviteToken ? { invite_token: inviteToken } : {}) });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`);
  return { client, email, id: res.body.principal.id, slug: res.body.workspace.slug, workspace: res.body.workspace };
}

/** A fresh browser profile signed in through the /login form, on /app. */
export async function signedInPage(browser: Browser, base: string, email: string, viewport?: { width: number; height: number }) {
  const opened = await openPage(browser, base, viewport);
  const { page } = opened;
  await page.goto('/login?next=%2Fapp');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(WEB_PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/app');
  return opened;
}

/** The client's cookies as a browser would send them. */
export const cookieOf = (c: Client) => [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');

/** What a browser gets back from a page or a form post, redirects not followed. */
export type FormAnswer = { status: number; text: string; location: string | null };

/** A GET as a browser sends it (Accept: text/html, the session cookies), redirects not followed. */
export async function browse(s: { url: string }, c: Client, url: string): Promise<FormAnswer> {
  const res = await fetch(s.url + url, { headers: { accept: 'text/html', cookie: cookieOf(c) }, redirect: 'manual' });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}

/** A form POST as a browser sends it (fields url-encoded, a field repeated for an array), redirects not followed. */
export async function submit(s: { url: string }, c: Client, url: string, fields: Record<string, string | string[]>): Promise<FormAnswer> {
  const form = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) for (const x of Array.isArray(v) ? v : [v]) form.append(k, x);
  const res = await fetch(s.url + url, {
    method: 'POST',
    headers: { accept: 'text/html', cookie: cookieOf(c), 'content-type': 'application/x-www-form-urlencoded' },
    body: form.toString(),
    redirect: 'manual',
  });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}
