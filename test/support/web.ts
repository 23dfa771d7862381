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
}

/** Signs a person up through the JSON API (with an invite: they join that workspace, and sign-in lands in it). */
export async function webPerson(base: string, name: string, inviteToken?: string): Promise<WebPerson> {
  const client = new Client(base);
  const email = freshEmail(name);
  const res = await client.post('/api/v1/auth/signup', { email, password: WEB_PASSWORD, name, ...(inviteToken ? { invite_token: inviteToken } : {}) });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`);
  return { client, email, id: res.body.principal.id, slug: res.body.workspace.slug };
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
