import test from 'ava';
import type { BrowserContext, Page, Request } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { createTestUser } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

// What the console does when the operator walks away from a stream, when a sign-in half succeeds,
// when a proxy (not the API) answers an error, and when an admin loses the role while signed in.
// Debian's Chromium driven by playwright-core against the whole platform, as in console.test.ts.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fake: FakeUpstream;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'resil', models: [{ id: 'resil-model' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  chrome = await openConsoleBrowser();
  browser = chrome.browser;
  const registered = await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Resil', vendor: 'fake', base_url: fake.url }) });
  if (registered.status !== 201) throw new Error(`provider not registered: ${JSON.stringify(registered.body)}`);
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
  await fake?.close();
});

const api = async (path: string, init: RequestInit & { key?: string } = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': init.key ?? ADMIN_KEY } });
  return { status: res.status, body: (await res.json().catch(() => null)) as any };
};

/** `promise`, or a failure naming `what` once `ms` have passed without it (a bound, not a pause). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, bound]).finally(() => clearTimeout(timer));
}


const held = (page: Page) => page.evaluate("sessionStorage.getItem('console.credential')");

/** Sends a message the fake answers with one chunk ("held") and then holds open; resolves once "held" is on screen. */
async function startHeldStream(page: Page, marker: string) {
  await page.goto(`${p.url}/console/#/playground`);
  await page.locator('select[name=model] option').first().waitFor({ state: 'attached' });
  await page.getByLabel('Message', { exact: true }).fill(`${marker} #hold`);
  await page.getByRole('button', { name: 'Send' }).click();
  await page.locator('.message.assistant:last-child .content', { hasText: /^held$/ }).waitFor();
  // Still streaming: nothing ended it yet.
  if ((await page.locator('[role=status][data-state]').getAttribute('data-state')) !== 'streaming') throw new Error('the stream is not open');
}

test.serial('a playground stream is aborted when the operator opens another page', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  const marker = `leave-${randomBase62(8)}`;
  await startHeldStream(page, marker);
  const failed = page.waitForEvent('requestfailed', { predicate: (r: Request) => r.url().endsWith('/v1/chat/completions'), timeout: 15_000 });
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();
  // The page's request ended, and so did the provider's stream behind it (the fake holds it until the client leaves).
  await failed;
  await within(fake.abortedFor(marker), 15_000, 'the provider stream ended');
  t.is(fake.abortsOf(marker), 1);
  await page.close();
});

test.serial('a playground stream is aborted when the operator signs out', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  const marker = `signout-${randomBase62(8)}`;
  await startHeldStream(page, marker);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  await within(fake.abortedFor(marker), 15_000, 'the provider stream ended');
  t.is(fake.abortsOf(marker), 1);
  t.is(await held(page), null);
  await page.close();
});

test.serial('a password sign-in whose /auth/me fails ends the new session at the API: its refresh token renews nothing', async (t) => {
  const email = `halfway-${randomBase62(6).toLowerCase()}@example.com`;
  const password = `pw-${randomBase62(16)}`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  t.is(upgraded.status, 200, await upgraded.text());

  const page = await browser.newPage();
  await page.goto(`${p.url}/console/`);
  // The sign-in itself succeeds; "who am I" does not.
  await page.route('**/auth/me', (route) =>
    route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: { message: 'The service is restarting', type: 'api_error', param: null, code: 'unavailable' } }) }),
  );
  const form = page.getByRole('form', { name: 'Password sign-in' });
  await form.getByLabel('E-mail').fill(email);
  await form.getByLabel('Password').fill(password);
  const login = page.waitForResponse((r) => r.url().endsWith('/llm/auth/login') && r.request().method() === 'POST');
  const logout = page.waitForRequest((r) => r.url().endsWith('/llm/auth/logout') && r.method() === 'POST', { timeout: 15_000 });
  await form.getByRole('button', { name: 'Sign in with password' }).click();
  const pair = (await (await login).json()) as { access_token: string; refresh_token: string };
  t.truthy(pair.refresh_token);
  await form.getByRole('alert').filter({ hasText: 'Error 503: The service is restarting' }).waitFor();
  t.is(await held(page), null, 'nothing kept in the tab');

  // The console ended the session of the pair it dropped.
  const sent = await logout;
  t.deepEqual(sent.postDataJSON(), { refresh_token: pair.refresh_token });
  t.is((await sent.response())?.status(), 200);
  const reuse = await fetch(`${p.url}/llm/auth/refresh`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: pair.refresh_token }) });
  t.is(reuse.status, 401, 'the dropped refresh token renews nothing');
  await page.close();
});

test.serial('an error answered by a proxy (HTML, not JSON) shows its status text and, for 502/503/504, that a proxy or the API is unavailable; never the HTML', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();
  const html = (status: number) => `<html><head><title>${status} proxy page</title></head><body><center><h1>${status} proxy page</h1></center><hr><center>nginx</center><script>window.__proxied=1</script></body></html>`;
  const answer = (status: number, headers: Record<string, string> = {}) =>
    page.route('**/v1/admin/usage?*', (route) => route.fulfill({ status, contentType: 'text/html', headers, body: html(status) }));

  const cases: Array<[number, string, boolean]> = [
    [502, 'Bad Gateway', true],
    [503, 'Service Unavailable', true],
    [504, 'Gateway Timeout', true],
    [500, 'Internal Server Error', false],
  ];
  for (const [index, [status, text, proxy]] of cases.entries()) {
    const requestId = `req_proxy_${index}`;
    await answer(status, { 'x-request-id': requestId });
    await page.getByRole('button', { name: 'Show' }).click();
    // Each case waits for its own alert (by request id): the one before is still on screen until then.
    const alert = page.getByRole('alert').filter({ has: page.locator(`[data-request-id="${requestId}"]`) });
    await alert.waitFor({ timeout: 10_000 });
    const shown = (await alert.textContent()) ?? '';
    t.true(shown.startsWith(`Error ${status}: ${text}`), shown);
    t.is(/A proxy in front of the API, or the API itself, is unavailable/.test(shown), proxy, shown);
    t.false(/proxy page|nginx|<|__proxied/.test(shown), `no part of the HTML body is shown: ${shown}`);
    await page.unroute('**/v1/admin/usage?*');
  }
  t.is(await page.locator('center, h1:has-text("proxy page"), script:not([src])').count(), 0, 'no element of the HTML body on the page');
  t.is(await page.evaluate('window.__proxied'), undefined);
  await page.close();
});

test.serial('an admin demoted while signed in loses the admin menu at the next refused admin call', async (t) => {
  const user = await createTestUser(p.runtime.db.knex, { admin: true });
  const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: user.id, name: 'soon demoted', tier: 'free' }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  const key = created.body.key as string;

  const page = await signIn(browser, p.url, key);
  await page.getByRole('link', { name: 'Users' }).click();
  await page.locator('tr[data-user-id]').first().waitFor({ timeout: 10_000 });
  t.true((await page.locator('nav a').allTextContents()).includes('Users'));

  t.is((await api(`/v1/admin/users/${user.id}`, { method: 'PATCH', body: JSON.stringify({ is_admin: false }) })).status, 200);
  await waitFor(async () => (await api('/v1/admin/users?limit=1', { key })).status === 403, 10_000, 'the API refuses the demoted user');

  // The page's next call is refused: the console asks who the user is and redraws the menu.
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByRole('status').filter({ hasText: 'no longer an administrator' }).waitFor({ timeout: 10_000 });
  t.deepEqual(await page.locator('nav a').allTextContents(), ['Playground', 'API keys', 'Usage']);
  await page.getByRole('heading', { name: 'Page not found' }).waitFor();
  t.false(((await page.locator('header .who').textContent()) ?? '').includes('(admin)'));
  t.truthy(await held(page), 'still signed in');
  await page.close();
});

test.serial('an admin page refused with 403 while the user is still an admin asks /auth/me once per refusal and redraws nothing', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Users' }).click();
  await page.locator('tr[data-user-id]').first().waitFor({ timeout: 10_000 });
  let refused = 0;
  let asked = 0;
  page.on('request', (r) => {
    if (new URL(r.url()).pathname === '/auth/me') asked++;
  });
  await page.route('**/v1/admin/users?*', (route) => {
    refused++;
    return route.fulfill({
      status: 403,
      contentType: 'application/json',
      headers: { 'x-request-id': `req_refused_${refused}` },
      body: JSON.stringify({ error: { message: 'Administrator rights required', type: 'permission_error', param: null, code: null } }),
    });
  });

  const reread = page.waitForResponse((r) => new URL(r.url()).pathname === '/auth/me');
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByRole('alert').filter({ has: page.locator('[data-request-id="req_refused_1"]') }).waitFor({ timeout: 10_000 });
  t.is((await reread).status(), 200);
  // A second refusal, after the first re-read was answered: its error stays in place (a redraw would wipe it).
  await page.getByRole('button', { name: 'Find' }).click();
  const second = page.getByRole('alert').filter({ has: page.locator('[data-request-id="req_refused_2"]') });
  await second.waitFor({ timeout: 10_000 });
  t.true((await page.locator('nav a').allTextContents()).includes('Users'));
  t.is(await page.getByRole('heading', { name: 'Users' }).count(), 1);
  t.is(await page.getByRole('status').filter({ hasText: 'no longer an administrator' }).count(), 0);
  t.is(refused, 2, 'the users list was asked for once per click: no redraw asked again');
  t.true(asked >= 1 && asked <= 2, `one re-read per refusal at most (${asked})`);
  t.true(await second.isVisible());
  await page.close();
});
