import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { createTestUser, type TestUser } from '../helpers/users.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// The console's session when things go wrong (a credential the API stops accepting, an API that
// is down when the tab is reopened), forms that mint a secret sent once however often they are
// clicked, and the users list past its first page. Debian's Chromium driven by playwright-core
// against the whole platform, as in console.test.ts.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const SESSION_ENDED = /Your session has ended/;
let p: TestPlatform;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  chrome = await openConsoleBrowser();
  browser = chrome.browser;
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
});

const api = async (path: string, init: RequestInit & { key?: string } = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': init.key ?? ADMIN_KEY } });
  return { status: res.status, body: (await res.json().catch(() => null)) as any };
};


const adminId = async (): Promise<string> => (await api('/auth/me')).body.id as string;
const held = (page: Page) => page.evaluate("sessionStorage.getItem('console.credential')");

test.serial('a key revoked while signed in ends the session: the sign-in page says why, and signing in again returns to the page', async (t) => {
  const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: await adminId(), name: 'soon revoked', tier: 'free' }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  const page = await signIn(browser, p.url, created.body.key as string);
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();

  t.true([200, 204].includes((await api(`/v1/admin/api-keys/${created.body.id}`, { method: 'DELETE' })).status));
  await waitFor(async () => (await api('/v1/models', { key: created.body.key })).status === 401, 10_000, 'the revoked key is refused');

  // The next call the page makes meets the refusal: the console signs out and says why.
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('alert').filter({ hasText: SESSION_ENDED }).waitFor({ timeout: 10_000 });
  await page.getByLabel('API key').waitFor();
  t.is(await held(page), null, 'the refused credential is forgotten');
  t.is(await page.getByRole('button', { name: 'Sign out' }).count(), 0);

  // Signing in again lands on the page the session ended on.
  await page.getByLabel('API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();
  await page.close();
});

test.serial('a tab reopened while the API is down keeps its credential and offers Try again; a refused one is dropped with a reason', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  const credential = await held(page);
  t.truthy(credential);

  // The API answers 503 to "who am I": the error is shown with its request id, the credential is kept.
  await page.route('**/auth/me', (route) =>
    route.fulfill({
      status: 503,
      contentType: 'application/json',
      headers: { 'x-request-id': 'req_console_down' },
      body: JSON.stringify({ error: { message: 'The service is restarting', type: 'api_error', param: null, code: 'unavailable' } }),
    }),
  );
  await page.reload();
  const refusal = page.getByRole('alert').filter({ hasText: 'Error 503: The service is restarting' });
  await refusal.waitFor({ timeout: 10_000 });
  t.is(await refusal.locator('[data-request-id]').textContent(), 'req_console_down');
  t.is(await held(page), credential, 'the credential is kept while the API is down');

  // Unreachable: the error says so, not the browser's bare "Failed to fetch".
  await page.unroute('**/auth/me');
  await page.route('**/auth/me', (route) => route.abort('connectionrefused'));
  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByRole('alert').filter({ hasText: /could not be reached/ }).waitFor({ timeout: 10_000 });
  t.is(await held(page), credential);

  // Back up: Try again signs the tab in without asking for the key again.
  await page.unroute('**/auth/me');
  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();

  // A credential the API refuses (401) is dropped, and the sign-in page says why.
  await page.evaluate(`sessionStorage.setItem('console.credential', ${JSON.stringify(JSON.stringify({ kind: 'api_key', key: `sk_${randomBase62(32)}` }))})`);
  await page.reload();
  await page.getByRole('alert').filter({ hasText: SESSION_ENDED }).waitFor({ timeout: 10_000 });
  t.is(await held(page), null);
  await page.close();
});

test.serial('a double click on Create makes one key and one webhook, each secret shown', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  const posts: Array<Promise<unknown>> = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && /\/v1\/admin\/(api-keys|webhooks)$/.test(new URL(request.url()).pathname)) posts.push(request.response());
  });

  const name = `double ${randomBase62(6)}`;
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByLabel('Name').fill(name);
  await page.getByRole('button', { name: 'Create', exact: true }).dblclick();
  await page.locator('code.secret').waitFor();
  await page.locator('tr', { hasText: name }).first().waitFor();
  await Promise.all(posts);
  t.is(posts.length, 1, 'one POST left the page');
  const keys = (await api(`/v1/admin/api-keys?user_id=${await adminId()}&limit=100`)).body.data as Array<{ name: string }>;
  t.is(keys.filter((k) => k.name === name).length, 1, 'one key exists');

  posts.length = 0;
  const url = `https://hooks.example.com/${randomBase62(8)}`;
  await page.getByRole('link', { name: 'Webhooks' }).click();
  await page.getByLabel('URL').fill(url);
  await page.getByRole('button', { name: 'Create webhook' }).dblclick();
  await page.locator('code.secret').waitFor();
  await page.getByRole('article', { name: `Webhook ${url}` }).first().waitFor();
  await Promise.all(posts);
  t.is(posts.length, 1, 'one POST left the page');
  const hooks = (await api('/v1/admin/webhooks?limit=100')).body.data as Array<{ url: string }>;
  t.is(hooks.filter((w) => w.url === url).length, 1, 'one webhook exists');
  await page.close();
});

test.serial('users: Next page and Previous page reach every account past the first page', async (t) => {
  // 60 accounts besides the administrator (the API lists them oldest first).
  const created: TestUser[] = [];
  for (let i = 0; i < 60; i++) created.push(await createTestUser(p.runtime.db.knex));
  const newest = created.at(-1)!.email;
  const total = (await api('/v1/admin/users?is_guest=false&limit=1')).body.total_count as number;
  t.true(total > 50);

  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Users' }).click();
  await page.locator('.page-range', { hasText: `1–50 of ${total}` }).waitFor({ timeout: 10_000 });
  t.is(await page.locator('tr[data-user-id]').count(), 50);
  // An e-mail typed without pressing Find does not change the list the page buttons move through.
  await page.getByLabel('E-mail', { exact: true }).fill('nobody@example.com');
  await page.getByRole('button', { name: 'Next page' }).click();
  await page.locator('.page-range', { hasText: `51–${total} of ${total}` }).waitFor();
  const second = await page.locator('tr[data-user-id] td:first-child').allTextContents();
  t.is(second.length, total - 50);
  t.true(second.some((text) => text.startsWith(newest)), 'the newest account is on the second page');
  t.false(second.some((text) => text.startsWith(created[0]!.email)), 'the oldest is not');
  t.true(await page.getByRole('button', { name: 'Next page' }).isDisabled());
  await page.getByRole('button', { name: 'Previous page' }).click();
  await page.locator('.page-range', { hasText: `1–50 of ${total}` }).waitFor();
  t.true(await page.getByRole('button', { name: 'Previous page' }).isDisabled());
  await page.close();
});

test.serial('a 429 says when to try again, and a 403 is shown in place without ending the session', async (t) => {
  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();
  const refuse = (status: number, message: string, headers: Record<string, string> = {}) =>
    page.route('**/v1/admin/usage?*', (route) =>
      route.fulfill({ status, contentType: 'application/json', headers, body: JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }) }),
    );

  await refuse(429, 'Rate limit exceeded: 60 requests per minute', { 'retry-after': '30' });
  await page.getByRole('button', { name: 'Show' }).click();
  const limited = page.getByRole('alert').filter({ hasText: 'Error 429: Rate limit exceeded: 60 requests per minute' });
  await limited.waitFor({ timeout: 10_000 });
  t.regex((await limited.textContent()) ?? '', /Try again in 30 s\./);

  await page.unroute('**/v1/admin/usage?*');
  await refuse(403, 'Administrator rights required');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('alert').filter({ hasText: 'Error 403: Administrator rights required' }).waitFor({ timeout: 10_000 });
  t.is(await page.getByRole('button', { name: 'Sign out' }).count(), 1, 'still signed in');
  t.truthy(await held(page));
  await page.close();
});

test.serial('webhooks: deliveries past the first 20 are reached with Older deliveries', async (t) => {
  const url = `https://hooks.example.com/${randomBase62(8)}`;
  const created = await api('/v1/admin/webhooks', { method: 'POST', body: JSON.stringify({ url, events: ['*'] }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  for (let i = 0; i < 22; i++) t.is((await api(`/v1/admin/webhooks/${created.body.id}/test`, { method: 'POST', body: '{}' })).status, 202);
  const listed = (await api(`/v1/admin/webhooks/${created.body.id}/deliveries?limit=100`)).body as { data: Array<{ id: string }> };
  t.is(listed.data.length, 22);

  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Webhooks' }).click();
  const card = page.getByRole('article', { name: `Webhook ${url}` });
  await card.getByRole('button', { name: `Show deliveries of ${url}` }).click();
  await card.locator('.page-range', { hasText: '1–20 of 22' }).waitFor({ timeout: 10_000 });
  t.deepEqual(await card.locator('tr[data-delivery-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-delivery-id'))), listed.data.slice(0, 20).map((d) => d.id));
  await card.getByRole('button', { name: `Older deliveries of ${url}` }).click();
  await card.locator('.page-range', { hasText: '21–22 of 22' }).waitFor();
  t.deepEqual(await card.locator('tr[data-delivery-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-delivery-id'))), listed.data.slice(20).map((d) => d.id));
  t.true(await card.getByRole('button', { name: `Older deliveries of ${url}` }).isDisabled());
  await card.getByRole('button', { name: `Newer deliveries of ${url}` }).click();
  await card.locator('.page-range', { hasText: '1–20 of 22' }).waitFor();
  await page.close();
});

test.serial('recent requests: the page buttons move through the list on screen, not a filter typed since without Find', async (t) => {
  const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: await adminId(), name: 'paged requests', tier: 'free' }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  const { key, id: keyId } = created.body as { key: string; id: string };
  for (let i = 0; i < 22; i++) t.is((await api('/v1/models', { key })).status, 200);
  // The log is written in batches off the request path: wait until the API lists all 22.
  await waitFor(async () => (await api(`/v1/admin/requests?key_id=${keyId}&limit=1`)).body.total_count === 22, 60_000, 'the 22 requests in the log');

  const page = await signIn(browser, p.url, ADMIN_KEY);
  await page.getByRole('link', { name: 'Recent requests' }).click();
  await page.getByLabel('Key id').fill(keyId);
  await page.getByRole('button', { name: 'Find' }).click();
  await page.locator('.page-range', { hasText: /^1–20 of 22$/ }).waitFor({ timeout: 10_000 });
  await page.getByLabel('Request id').fill('typed-but-not-applied');
  await page.getByRole('button', { name: 'Next page' }).click();
  await page.locator('.page-range', { hasText: /^21–22 of 22$/ }).waitFor({ timeout: 10_000 });
  t.is(await page.locator('tr[data-request-id]').count(), 2);
  t.is(await page.getByLabel('Request id').inputValue(), 'typed-but-not-applied', 'the field keeps what was typed');
  await page.close();
});

test.serial('a token sign-in whose renewal meets a down or busy API (503, 429) stays signed in and shows why; a refused refresh token ends the session', async (t) => {
  // An account with a password: a guest upgraded with an e-mail and a password.
  const email = `renewal-${randomBase62(6).toLowerCase()}@example.com`;
  const password = `pw-${randomBase62(16)}`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  t.is(upgraded.status, 200, await upgraded.text());

  const page = await browser.newPage();
  page.on('pageerror', (error) => console.error('page error:', error.message));
  await page.goto(`${p.url}/console/`);
  const form = page.getByRole('form', { name: 'Password sign-in' });
  await form.getByLabel('E-mail').fill(email);
  await form.getByLabel('Password').fill(password);
  await form.getByRole('button', { name: 'Sign in with password' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  const signedIn = await held(page);
  t.is(JSON.parse(signedIn as string).kind, 'token');

  const refreshAnswers = (status: number, message: string, headers: Record<string, string>) =>
    page.route('**/llm/auth/refresh', (route) =>
      route.fulfill({ status, contentType: 'application/json', headers, body: JSON.stringify({ error: { message, type: 'api_error', param: null, code: null } }) }),
    );
  // The keys list meets a refused access token (as when it expired) once; the console renews it.
  const expireOnce = () =>
    page.route('**/auth/api-keys?*', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: JSON.stringify({ error: { message: 'Invalid or expired token', type: 'authentication_error', param: null, code: null } }) }), { times: 1 });

  // While signed in: the refresh answers 503. The page says the session could not be renewed now.
  await refreshAnswers(503, 'The service is restarting', { 'retry-after': '20', 'x-request-id': 'req_renew_down' });
  await expireOnce();
  await page.getByRole('link', { name: 'API keys' }).click();
  const down = page.getByRole('alert').filter({ hasText: 'Error 503: Your session could not be renewed right now' });
  await down.waitFor({ timeout: 10_000 });
  t.regex((await down.textContent()) ?? '', /The service is restarting/);
  t.regex((await down.textContent()) ?? '', /Try again in 20 s\./);
  t.is(await down.locator('[data-request-id]').textContent(), 'req_renew_down');
  t.is(await page.getByRole('alert').filter({ hasText: SESSION_ENDED }).count(), 0);
  t.is(await page.getByRole('button', { name: 'Sign out' }).count(), 1, 'still signed in');
  t.is(await held(page), signedIn, 'the token pair is kept');

  // A tab reopened with an access token the API refuses while the refresh is rate-limited (429):
  // the credential is kept and the error shown with Try again.
  await page.unroute('**/llm/auth/refresh');
  await refreshAnswers(429, 'Rate limit exceeded: 10 requests per minute', { 'retry-after': '30' });
  const pair = JSON.parse(signedIn as string) as { kind: 'token'; access: string; refresh: string };
  const expired = JSON.stringify({ ...pair, access: 'expired.access.token' });
  await page.evaluate(`sessionStorage.setItem('console.credential', ${JSON.stringify(expired)})`);
  await page.reload();
  const busy = page.getByRole('alert').filter({ hasText: 'Error 429: Your session could not be renewed right now' });
  await busy.waitFor({ timeout: 10_000 });
  t.regex((await busy.textContent()) ?? '', /Try again in 30 s\./);
  t.is(await held(page), expired, 'the token pair is kept while the API is busy');

  // The API answers again: Try again renews the pair with the real refresh endpoint and signs in.
  await page.unroute('**/llm/auth/refresh');
  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor({ timeout: 10_000 });
  const renewed = JSON.parse((await held(page)) as string) as { access: string; refresh: string };
  t.not(renewed.access, 'expired.access.token');
  t.not(renewed.refresh, pair.refresh, 'the refresh token was spent and replaced');

  // A refresh token the API refuses (401) ends the session, with the reason.
  await page.getByRole('link', { name: 'Usage' }).click();
  await refreshAnswers(401, 'Invalid or expired refresh token', {});
  await expireOnce();
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByRole('alert').filter({ hasText: SESSION_ENDED }).waitFor({ timeout: 10_000 });
  t.is(await held(page), null, 'the refused pair is forgotten');
  await page.close();
});
