import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';
import { startReceiver } from '../webhooks/helpers.js';

// The web console in a real browser (Debian's Chromium driven by playwright-core) against the
// whole platform behind the embedded edge, with a fake OpenAI-compatible provider. Screenshots of
// each page go to test-output/console/ (git-ignored) for review.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const SHOTS = join(process.cwd(), 'test-output', 'console');
const HOSTILE = '<img src=x onerror="window.__xss=1">';
let p: TestPlatform;
let fake: FakeUpstream;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  fake = await startFakeUpstream({ name: 'fakeco', models: [{ id: 'console-model' }, { id: 'console-other' }] });
  receiver = await startReceiver();
  // Webhooks may reach the local receiver (the egress guard refuses loopback otherwise).
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', EGRESS_ALLOW_HOSTS: '127.0.0.1', LOGIN_MAX_FAILURES: '3' } });
  chrome = await openConsoleBrowser({ acceptDownloads: true });
  browser = chrome.browser;
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
  await fake?.close();
  await receiver?.close();
});

const api = async (path: string, init: RequestInit & { key?: string } = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': init.key ?? ADMIN_KEY, ...(init.headers ?? {}) } });
  return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? await res.json() : await res.text() };
};

async function signedIn(key: string, viewport = { width: 1280, height: 800 }): Promise<{ context: BrowserContext; page: Page }> {
  return { context: browser, page: await signIn(browser, p.url, key, viewport) };
}

async function pickerOptions(page: Page): Promise<string[]> {
  await page.goto(`${p.url}/console/#/playground`);
  await page.reload();
  await page.locator('select[name=model] option').first().waitFor({ state: 'attached' });
  return page.locator('select[name=model] option').evaluateAll((options) => options.map((o) => o.getAttribute('value') ?? ''));
}

test.serial('the console files carry a strict CSP, X-Frame-Options DENY and no referrer; nothing outside the folder is served', async (t) => {
  for (const path of ['/console/', '/console/main.js', '/console/console.css', '/console/pages/playground.js']) {
    const res = await fetch(`${p.url}${path}`);
    t.is(res.status, 200, path);
    const csp = res.headers.get('content-security-policy') ?? '';
    t.regex(csp, /script-src 'self'(;|$)/, path);
    t.regex(csp, /connect-src 'self'(;|$)/, path);
    t.regex(csp, /frame-ancestors 'none'/, path);
    t.notRegex(csp, /unsafe-inline|unsafe-eval/, path);
    t.is(res.headers.get('x-frame-options'), 'DENY', path);
    t.is(res.headers.get('referrer-policy'), 'no-referrer', path);
    t.is(res.headers.get('cross-origin-resource-policy'), 'same-origin', path);
    t.regex(res.headers.get('permissions-policy') ?? '', /camera=\(\), microphone=\(\)/, path);
  }
  const html = await (await fetch(`${p.url}/console/`)).text();
  t.notRegex(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in the page');
  for (const path of ['/console/..%2Fpackage.json', '/console/%2e%2e/package.json', '/console/pages/../../package.json', '/console/x.json']) {
    const res = await fetch(`${p.url}${path}`);
    t.is(res.status, 404, path);
  }
  const redirect = await fetch(`${p.url}/console`, { redirect: 'manual' });
  t.is(redirect.status, 301);
});

test.serial('admin: sign in → register a provider → its models appear → disable one → it leaves the playground picker', async (t) => {
  const { context, page } = await signedIn(ADMIN_KEY);
  // The key is held in this tab's sessionStorage only: no cookie, no localStorage, not in the URL.
  t.deepEqual(JSON.parse(await page.evaluate("sessionStorage.getItem('console.credential')")), { kind: 'api_key', key: ADMIN_KEY });
  t.is(await page.evaluate('localStorage.length'), 0);
  t.deepEqual(await context.cookies(), []);
  t.false(page.url().includes(ADMIN_KEY));

  await page.getByRole('link', { name: 'Providers and models' }).click();
  await page.getByLabel('Name', { exact: true }).fill('Fake Co');
  await page.getByLabel('Vendor').fill('fake');
  await page.getByLabel('Base URL').fill(fake.url);
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByText('Registered Fake Co.').waitFor();
  await page.locator('tr[data-model="console-model"]').waitFor();
  await page.locator('tr[data-model="console-other"]').waitFor();
  await page.screenshot({ path: join(SHOTS, 'providers.png'), fullPage: true });

  t.deepEqual((await pickerOptions(page)).sort(), ['console-model', 'console-other']);
  await page.screenshot({ path: join(SHOTS, 'playground-picker.png'), fullPage: true });

  await page.goto(`${p.url}/console/#/providers`);
  await page.getByRole('button', { name: 'Disable console-other' }).click();
  await page.getByRole('button', { name: 'Enable console-other' }).waitFor();
  t.is(await page.locator('tr[data-model="console-other"] td').nth(3).textContent(), 'disabled');
  t.deepEqual(await pickerOptions(page), ['console-model']);

  // Sign-out clears the credential.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  t.is(await page.evaluate('sessionStorage.length'), 0);
  await page.reload();
  await page.getByLabel('API key').waitFor();
  await page.close();
});

test.serial('admin: providers — sync every provider with the run status shown, edit the endpoints, price a model', async (t) => {
  const { page } = await signedIn(ADMIN_KEY);
  await page.getByRole('link', { name: 'Providers and models' }).click();
  await page.getByRole('button', { name: 'Sync every provider in the background' }).click();
  const finished = page.locator('.sync-status[data-sync-status=succeeded]');
  await finished.waitFor({ timeout: 30_000 });
  t.regex((await finished.textContent()) ?? '', /^Sync succeeded: 1 providers synced, 0 failed;/);

  const provider = ((await api('/v1/admin/providers')).body as { data: Array<{ id: string; name: string }> }).data.find((x) => x.name === 'Fake Co')!;
  await page.getByRole('button', { name: 'Edit Fake Co' }).click();
  await page.getByLabel(/^Endpoints/).fill(`${fake.url} 0 3`);
  await page.getByRole('button', { name: 'Save provider' }).click();
  await page.getByText('Saved Fake Co.').waitFor();
  const saved = (await api(`/v1/admin/providers/${provider.id}`)).body as { endpoints: Array<{ url: string; weight: number; priority: number }> };
  t.like(saved.endpoints[0], { priority: 0, weight: 3 });

  await page.getByRole('button', { name: 'Pricing of console-model' }).click();
  await page.getByLabel('Prompt, USD per 1M tokens').fill('1.5');
  await page.getByLabel('Completion, USD per 1M tokens').fill('3');
  await page.getByRole('button', { name: 'Save pricing' }).click();
  await page.locator('tr[data-model="console-model"] td.price', { hasText: '$1.5/1M prompt, $3/1M completion' }).waitFor();
  const models = (await api('/v1/admin/models/provider-models?limit=100')).body as { data: Array<{ model_public_id: string; pricing: { lines: Array<{ unit: string; amount_micro_usd: number }> } }> };
  const lines = models.data.find((m) => m.model_public_id === 'console-model')!.pricing.lines.map((l) => `${l.unit}=${l.amount_micro_usd}`).sort();
  t.deepEqual(lines, ['per_1m_completion_tokens=3000000', 'per_1m_prompt_tokens=1500000']);
  await page.screenshot({ path: join(SHOTS, 'providers-edit.png'), fullPage: true });
  await page.close();
});

test.serial('playground: the answer renders while the stream is open → stop → a full answer → the conversation is listed → edit a message → a branch appears → regenerate', async (t) => {
  const { page } = await signedIn(ADMIN_KEY);
  await page.goto(`${p.url}/console/#/playground`);
  await page.locator('select[name=model] option').first().waitFor({ state: 'attached' });
  await page.getByLabel('Message', { exact: true }).fill('hello #hold');
  await page.getByRole('button', { name: 'Send' }).click();
  // The fake sends one chunk ("held") and keeps the stream open: the text is on screen before the end.
  const answer = page.locator('.message.assistant .content').last();
  // A locator wait, not waitForFunction: the console's CSP forbids the eval that a string predicate needs.
  await page.locator('.message.assistant:last-child .content', { hasText: /^held$/ }).waitFor();
  t.is(await page.locator('[role=status][data-state]').getAttribute('data-state'), 'streaming');
  await page.screenshot({ path: join(SHOTS, 'playground-streaming.png'), fullPage: true });
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.locator('[data-state=stopped]').waitFor();
  t.is(await answer.textContent(), 'held');

  await page.getByLabel('Message', { exact: true }).fill('and now in full');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.locator('[data-state=done]').waitFor();
  t.is(await page.locator('.message.assistant .content').last().textContent(), 'Hello from fakeco w1 w2 w3 w4');

  // The conversation is stored and listed, with its history from the conversations API.
  const listed = page.locator('.conversations button', { hasText: 'hello #hold' });
  await listed.waitFor();
  const conversationId = (await listed.getAttribute('data-conversation-id'))!;
  const conversations = (await api('/v1/conversations?limit=5')).body as { data: Array<{ id: string; title: string }> };
  t.is(conversations.data[0]!.id, conversationId);
  const items = async (branch = '') => ((await api(`/v1/conversations/${conversationId}/items?order=asc${branch && `&branch=${branch}`}`)).body as { data: Array<{ role: string; content: Array<{ text: string }> }> }).data.map((i) => `${i.role}: ${i.content[0]!.text}`);
  t.deepEqual(await items(), ['user: hello #hold', 'assistant: held', 'user: and now in full', 'assistant: Hello from fakeco w1 w2 w3 w4']);
  await page.getByRole('button', { name: 'New chat' }).click();
  t.is(await page.locator('.transcript .message').count(), 0);
  await listed.click();
  await page.locator('.message.user', { hasText: 'and now in full' }).waitFor();
  t.deepEqual(await page.locator('.transcript .message .content').allTextContents(), ['hello #hold', 'held', 'and now in full', 'Hello from fakeco w1 w2 w3 w4']);
  await page.screenshot({ path: join(SHOTS, 'playground.png'), fullPage: true });

  // Edit the second message: a new MAIN with the edited text and a new answer; the old MAIN is a backup branch.
  await page.locator('.message.user', { hasText: 'and now in full' }).getByRole('button', { name: 'Edit' }).click();
  await page.getByLabel('Edited message').fill('and now edited #words:3');
  await page.getByRole('button', { name: 'Save and answer' }).click();
  await page.locator('.branches li[data-branch="MAIN_backup_1"]').waitFor();
  await page.locator('[data-state=done]').waitFor();
  t.deepEqual(await page.locator('.transcript .message .content').allTextContents(), ['hello #hold', 'held', 'and now edited #words:3', 'Hello from fakeco w1 w2']);
  t.deepEqual(await items(), ['user: hello #hold', 'assistant: held', 'user: and now edited #words:3', 'assistant: Hello from fakeco w1 w2']);
  t.deepEqual(await items('MAIN_backup_1'), ['user: hello #hold', 'assistant: held', 'user: and now in full', 'assistant: Hello from fakeco w1 w2 w3 w4']);
  t.is(await page.locator('.branches li[data-active=true]').getAttribute('data-branch'), 'MAIN');
  await page.screenshot({ path: join(SHOTS, 'playground-branches.png'), fullPage: true });

  // Regenerate the last answer: another backup, and MAIN ends with a fresh answer.
  await page.locator('.message.assistant').last().getByRole('button', { name: 'Regenerate' }).click();
  await page.locator('.branches li[data-branch="MAIN_backup_2"]').waitFor();
  await page.locator('[data-state=done]').waitFor();
  t.is((await items()).length, 4);
  t.is((await items('MAIN_backup_2')).length, 4);

  // Open the first backup: its history is shown.
  await page.locator('.branches').getByRole('button', { name: 'MAIN_backup_1', exact: true }).click();
  await page.locator('.branches li[data-branch="MAIN_backup_1"][data-active=true]').waitFor();
  await page.locator('.message.user', { hasText: 'and now in full' }).waitFor();

  // An API error is shown in place with its request id.
  await page.getByLabel('Message', { exact: true }).fill('fail please #fail:400');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.locator('[data-state=error]').waitFor();
  const requestId = await page.locator('.message.assistant [data-request-id]').last().textContent();
  t.regex(requestId ?? '', /\S{8,}/);
  await page.close();
});

test.serial('a model name containing markup renders as text', async (t) => {
  const models = (await api('/v1/admin/models/provider-models?limit=100')).body as { data: Array<{ id: string; model_public_id: string }> };
  const target = models.data.find((m) => m.model_public_id === 'console-model')!;
  const patched = await api(`/v1/admin/models/provider-models/${target.id}`, { method: 'PATCH', body: JSON.stringify({ model_display_name: HOSTILE }) });
  t.is(patched.status, 200, JSON.stringify(patched.body));

  const { page } = await signedIn(ADMIN_KEY);
  await page.goto(`${p.url}/console/#/providers`);
  const cell = page.locator('tr[data-model="console-model"] td').nth(1);
  await cell.waitFor();
  t.is(await cell.textContent(), HOSTILE);
  await waitFor(async () => ((await api('/v1/models')).body as { data: Array<{ model_display_name?: string }> }).data.some((m) => m.model_display_name === HOSTILE), 10_000, 'display name in /v1/models');
  await page.goto(`${p.url}/console/#/playground`);
  await page.reload();
  await page.locator('select[name=model] option').first().waitFor({ state: 'attached' });
  t.is(await page.locator('select[name=model] option[value="console-model"]').textContent(), `console-model — ${HOSTILE}`);
  t.is(await page.locator('img').count(), 0);
  t.is(await page.evaluate('typeof window.__xss'), 'undefined');
  await page.close();
});

test.serial('admin: create a key with a budget and a model allow-list → the secret is shown once → it works → revoke', async (t) => {
  const { page } = await signedIn(ADMIN_KEY);
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByLabel('Name').fill('console budget key');
  await page.getByLabel('Tier').selectOption('pro');
  await page.getByLabel('Budget: requests per day').fill('100');
  await page.getByLabel('Spending budget (USD)').fill('2.5');
  await page.getByLabel('Budget period').selectOption('month');
  await page.getByLabel(/^Allowed models/).fill('console-model, console-x*');
  await page.getByRole('button', { name: 'Create' }).click();
  const secret = (await page.locator('code.secret').textContent()) ?? '';
  t.regex(secret, /^sk_[0-9A-Za-z]{32}$/);
  t.is(await page.locator('.key-spend').textContent(), 'console budget key: $2.50 per month; models: console-model, console-x*');
  await page.screenshot({ path: join(SHOTS, 'keys-secret.png'), fullPage: true });
  const row = page.locator('tr', { hasText: 'console budget key' });
  await row.waitFor();
  t.regex((await row.textContent()) ?? '', /100\/day/);
  t.regex((await row.textContent()) ?? '', /pro/);
  // The list answers each key's budget and allow-list: the row shows them next to the rate limits.
  t.is(await row.locator('.key-budget').textContent(), '$2.50 per month; models: console-model, console-x*');
  // The API holds the budget and the allow-list the form sent (a no-op PATCH answers the key's limits).
  const id = (await row.getAttribute('data-key-id'))!;
  const stored = (await api(`/v1/admin/api-keys/${id}`, { method: 'PATCH', body: JSON.stringify({ tier: 'pro' }) })).body as Record<string, unknown>;
  t.like(stored, { budget_period: 'month', max_budget_micro_usd: 2_500_000, allowed_models: ['console-model', 'console-x*'] });
  t.is((await api('/v1/models', { key: secret })).status, 200);
  // Shown once: after leaving the page it is nowhere in the DOM.
  await page.reload();
  await page.locator('tr', { hasText: 'console budget key' }).waitFor();
  t.false((await page.content()).includes(secret));
  await page.getByRole('button', { name: 'Revoke console budget key' }).click();
  await page.locator('tr', { hasText: 'console budget key' }).waitFor({ state: 'detached' });
  t.true(await waitFor(async () => (await api('/v1/models', { key: secret })).status === 401, 10_000, 'revoked key refused'));
  await page.close();
});

test.serial('usage: the SVG chart shows the day from the API; the CSV export matches the API', async (t) => {
  const day = new Date().toISOString().slice(0, 10);
  const rows = await waitFor(async () => {
    const res = (await api(`/v1/admin/usage?group_by=day,model&from=${day}&to=${day}`)).body as { data: Array<{ day: string; model: string; requests: number }> };
    return res.data.find((r) => r.model === 'console-model' && r.requests >= 2) && res.data;
  }, 20_000, 'usage rows');
  const { page } = await signedIn(ADMIN_KEY);
  await page.getByRole('link', { name: 'Usage' }).click();
  const bar = page.locator(`svg.usage-chart rect[data-day="${day}"][data-model="console-model"]`);
  await bar.waitFor();
  const expected = rows.find((r) => r.model === 'console-model')!;
  t.is(Number(await bar.getAttribute('data-value')), expected.requests);
  await page.screenshot({ path: join(SHOTS, 'usage.png'), fullPage: true });

  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  const file = await download.path();
  const csv = readFileSync(file, 'utf8');
  const from = await page.getByLabel('From').inputValue();
  const fromApi = (await api(`/v1/admin/usage/export?group_by=day,model&from=${from}&to=${day}`)).body as string;
  t.is(csv, fromApi);
  t.true(csv.split('\n').some((line) => line.startsWith(`${day},console-model,${expected.requests},`)));

  // Stacked by API key instead: the bars follow the API's day,key grouping, and so does the export.
  const byKey = ((await api(`/v1/admin/usage?group_by=day,key&from=${from}&to=${day}`)).body as { data: Array<{ day: string; key_id: string | null; requests: number }> }).data;
  const keyRow = byKey.find((r) => r.day === day && r.key_id)!;
  await page.getByLabel('Stack by').selectOption('key');
  const keyBar = page.locator(`svg.usage-chart[data-stack=key] rect[data-day="${day}"][data-key="${keyRow.key_id}"]`);
  await keyBar.waitFor();
  t.is(Number(await keyBar.getAttribute('data-value')), keyRow.requests);
  t.is(await page.locator('table.usage th').nth(1).textContent(), 'API key');
  await page.screenshot({ path: join(SHOTS, 'usage-by-key.png'), fullPage: true });
  const [keyDownload] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  t.is(readFileSync(await keyDownload.path(), 'utf8'), (await api(`/v1/admin/usage/export?group_by=day,key&from=${from}&to=${day}`)).body as string);
  t.regex(keyDownload.suggestedFilename(), /^usage-key-/);
  await page.close();
});

test.serial('admin pages: users (disable, budget), webhooks (secret once, test, deliveries with attempts, redeliver, rotate), MCP tools (disable with a reason), catalog', async (t) => {
  // A user with an e-mail, to find on the users page.
  const email = `console-${randomBase62(6).toLowerCase()}@example.com`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string; user_id: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
  t.is(upgraded.status, 200);

  const { page } = await signedIn(ADMIN_KEY);
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByLabel('E-mail', { exact: true }).fill(email);
  await page.getByRole('button', { name: 'Find' }).click();
  const userRow = page.locator(`tr[data-user-id="${guest.user_id}"]`);
  await userRow.waitFor();
  await page.getByRole('button', { name: `Disable ${email}` }).click();
  await page.locator(`tr[data-user-id="${guest.user_id}"] td.status`, { hasText: 'disabled' }).waitFor();
  t.true(((await api(`/v1/admin/users/${guest.user_id}`)).body as { disabled: boolean }).disabled);
  await page.getByRole('button', { name: `Verify the e-mail of ${email}` }).click();
  await page.locator(`tr[data-user-id="${guest.user_id}"] td.kind`, { hasText: 'e-mail verified' }).waitFor();
  t.true(((await api(`/v1/admin/users/${guest.user_id}`)).body as { email_verified: boolean }).email_verified);
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  const budget = page.getByRole('form', { name: `Budget of ${email}` });
  await budget.getByLabel('Spending budget (USD)').fill('1');
  await budget.getByLabel('Allowed models').fill('console-model');
  await budget.getByRole('button', { name: 'Save budget' }).click();
  await page.getByText('Saved: $1.00 per day; models: console-model.').waitFor();
  await page.screenshot({ path: join(SHOTS, 'users.png'), fullPage: true });
  await page.getByRole('button', { name: `Enable ${email}` }).click();
  await page.locator(`tr[data-user-id="${guest.user_id}"] td.status`, { hasText: 'active' }).waitFor();
  t.false(((await api(`/v1/admin/users/${guest.user_id}`)).body as { disabled: boolean }).disabled);

  // Webhooks: create → the secret is shown once → send a test → the delivery and its attempt → redeliver → rotate.
  const hookUrl = receiver.url('/console');
  await page.getByRole('link', { name: 'Webhooks' }).click();
  await page.getByLabel('URL').fill(hookUrl);
  await page.getByLabel(/^Events/).fill('model.*, mcp_tool.*');
  await page.getByRole('button', { name: 'Create webhook' }).click();
  const firstSecret = (await page.locator('code.secret').textContent()) ?? '';
  t.regex(firstSecret, /^whsec_\w{32}$/);
  const hooks = (await api('/v1/admin/webhooks')).body as { data: Array<{ id: string; url: string; events: string[] }> };
  const hook = hooks.data.find((w) => w.url === hookUrl)!;
  t.deepEqual(hook.events, ['model.*', 'mcp_tool.*']);
  await page.getByRole('button', { name: `Send a test event to ${hookUrl}` }).click();
  await receiver.until((rs) => rs.some((r) => r.path === '/console' && r.headers['x-event-type'] === 'webhook.test'), 30_000, 'test event received');
  // The delivery is recorded once the receiver answered: refresh until the page shows it delivered.
  const delivered = page.locator('tr[data-status=delivered]', { hasText: 'webhook.test' });
  await waitFor(async () => {
    await page.getByRole('button', { name: `Refresh deliveries of ${hookUrl}` }).click();
    return (await delivered.count()) === 1;
  }, 20_000, 'delivery shown as delivered');
  t.regex((await delivered.locator('ol.attempts li').first().textContent()) ?? '', /^delivered 200.*\(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)$/);
  await page.screenshot({ path: join(SHOTS, 'webhooks.png'), fullPage: true });
  await delivered.getByRole('button', { name: /^Redeliver webhook\.test/ }).click();
  await receiver.until((rs) => rs.filter((r) => r.path === '/console' && r.headers['x-event-type'] === 'webhook.test').length === 2, 30_000, 'redelivered');
  await page.getByRole('button', { name: `Rotate the secret of ${hookUrl}` }).click();
  await page.locator('code.secret', { hasNotText: firstSecret }).waitFor();
  const rotated = (await page.locator('code.secret').textContent()) ?? '';
  t.regex(rotated, /^whsec_\w{32}$/);
  await page.getByRole('link', { name: 'MCP tools' }).click();
  // The click only starts the navigation: read the page once the next one has rendered.
  await page.getByRole('heading', { name: 'MCP tools', level: 1 }).waitFor();
  t.false((await page.content()).includes(rotated), 'the secret is gone once the page is left');

  // MCP tools: disable one with a reason → the API reports it → enable it again.
  const tools = (await api('/v1/admin/mcp/tools')).body as { data: Array<{ name: string; enabled: boolean }> };
  const tool = tools.data.find((x) => x.enabled)!;
  await page.getByLabel(`Reason for ${tool.name}`).fill('console test: <b>maintenance</b>');
  await page.getByRole('button', { name: `Disable ${tool.name}`, exact: true }).click();
  await page.locator(`tr[data-tool="${tool.name}"][data-enabled=false]`).waitFor();
  t.is(await page.locator(`tr[data-tool="${tool.name}"] .reason`).textContent(), 'Reason: console test: <b>maintenance</b>');
  t.is(await page.locator('b').count(), 0, 'the reason is text, not markup');
  t.like((await api(`/v1/admin/mcp/tools/${tool.name}`)).body as object, { enabled: false, reason: 'console test: <b>maintenance</b>' });
  await page.screenshot({ path: join(SHOTS, 'mcp-tools.png'), fullPage: true });
  await page.getByRole('button', { name: `Enable ${tool.name}`, exact: true }).click();
  await page.locator(`tr[data-tool="${tool.name}"][data-enabled=true]`).waitFor();
  // The webhook subscribed to mcp_tool.*: the two changes reach the receiver.
  await receiver.until((rs) => ['mcp_tool.disabled', 'mcp_tool.enabled'].every((type) => rs.some((r) => r.headers['x-event-type'] === type)), 30_000, 'mcp_tool events');

  // Catalog: the synced models are listed.
  await page.getByRole('link', { name: 'Catalog' }).click();
  await page.locator('tr[data-catalog="console-model"]').waitFor();
  await page.screenshot({ path: join(SHOTS, 'catalog.png'), fullPage: true });
  await page.close();
});

test.serial('admin: recent requests — find one by its request id, all of a key or a user, a page at a time', async (t) => {
  // A user of our own with a key of its own, so the counts below are exactly what this test made.
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { user_id: string };
  const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: guest.user_id, name: 'requests page', tier: 'free' }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  const { key, id: keyId } = created.body as { key: string; id: string };
  const prefix = `console-req-${randomBase62(8)}`;
  for (let i = 0; i < 21; i++) t.is((await api('/v1/models', { key, headers: { 'x-request-id': `${prefix}-${i}` } })).status, 200);
  const chatId = `${prefix}-chat`;
  const chat = await api('/v1/chat/completions', { key, method: 'POST', headers: { 'x-request-id': chatId }, body: JSON.stringify({ model: 'console-model', messages: [{ role: 'user', content: 'count me' }] }) });
  t.is(chat.status, 200, JSON.stringify(chat.body));
  const usage = (chat.body as { usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } }).usage;
  // The log is written in batches off the request path: wait until the API lists all 22.
  await waitFor(async () => ((await api(`/v1/admin/requests?key_id=${keyId}&limit=1`)).body as { total_count: number }).total_count === 22, 60_000, 'the 22 requests in the log');

  const { page } = await signedIn(ADMIN_KEY);
  await page.getByRole('link', { name: 'Recent requests' }).click();
  await page.getByRole('heading', { name: 'Recent requests' }).waitFor();

  // By request id: the chat completion with its model and token counts.
  await page.getByLabel('Request id').fill(chatId);
  await page.getByRole('button', { name: 'Find' }).click();
  const chatRow = page.locator(`tr[data-request-id="${chatId}"]`);
  // The page opened on the newest requests of all, which may include this one: wait for the found list.
  await page.locator('.page-range', { hasText: /^1–1 of 1$/ }).waitFor();
  await chatRow.waitFor();
  t.is(await page.locator('tr[data-request-id]').count(), 1);
  t.is(await chatRow.locator('td.status').textContent(), '200');
  t.regex((await chatRow.locator('td.model').textContent()) ?? '', /^console-model/);
  t.is(await chatRow.locator('td.tokens').textContent(), `${usage.prompt_tokens} + ${usage.completion_tokens} = ${usage.total_tokens}`);
  t.true(((await chatRow.textContent()) ?? '').includes('POST /v1/chat/completions'));
  await page.screenshot({ path: join(SHOTS, 'requests.png'), fullPage: true });

  // Everything of that key, from the row's own link: 20 per page, newest first.
  await chatRow.getByRole('button', { name: `Only key ${keyId}` }).click();
  await page.locator('.page-range', { hasText: '1–20 of 22' }).waitFor();
  t.is(await page.getByLabel('Key id').inputValue(), keyId);
  t.is(await page.getByLabel('Request id').inputValue(), '');
  const firstPage = await page.locator('tr[data-request-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-request-id')));
  const api20 = ((await api(`/v1/admin/requests?key_id=${keyId}&limit=20`)).body as { data: Array<{ id: string }> }).data.map((r) => r.id);
  t.deepEqual(firstPage, api20);
  t.is(firstPage[0], chatId, 'newest first');
  t.true(await page.getByRole('button', { name: 'Previous page' }).isDisabled());
  await page.getByRole('button', { name: 'Next page' }).click();
  await page.locator('.page-range', { hasText: '21–22 of 22' }).waitFor();
  const secondPage = await page.locator('tr[data-request-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-request-id')));
  t.deepEqual(secondPage, ((await api(`/v1/admin/requests?key_id=${keyId}&limit=20&offset=20`)).body as { data: Array<{ id: string }> }).data.map((r) => r.id));
  t.true(await page.getByRole('button', { name: 'Next page' }).isDisabled());
  await page.getByRole('button', { name: 'Previous page' }).click();
  await page.locator('.page-range', { hasText: '1–20 of 22' }).waitFor();

  // By user: the same 22 requests (the user has no other credential).
  await page.getByLabel('Key id').fill('');
  await page.getByLabel('User id').fill(guest.user_id);
  // The key's list read "1–20 of 22" too: wait for the answer to the user's query itself.
  const byUser = page.waitForResponse((r) => r.url().includes('/v1/admin/requests?') && new URL(r.url()).searchParams.get('user_id') === guest.user_id);
  await page.getByRole('button', { name: 'Find' }).click();
  t.is(((await (await byUser).json()) as { total_count: number }).total_count, 22);
  await page.locator('.page-range', { hasText: '1–20 of 22' }).waitFor();
  t.is(await page.locator(`tr[data-request-id="${prefix}-0"]`).count(), 0, 'the oldest is on the second page');

  // A request id nobody made, and a bad one: the API's answer in place.
  await page.getByLabel('User id').fill('');
  await page.getByLabel('Request id').fill(`${prefix}-none`);
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByText('No request matches.').waitFor();
  await page.getByLabel('Request id').fill('x'.repeat(129));
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByRole('alert').filter({ hasText: 'request_id' }).waitFor();
  await page.close();
});

test.serial('e-mail and password sign-in: a wrong password and a locked address show the API error in place; the right one signs in (token in this tab only) and the user manages their own keys', async (t) => {
  // An account with a password: a guest upgraded with an e-mail and a password.
  const email = `signin-${randomBase62(6).toLowerCase()}@example.com`;
  const password = `pw-${randomBase62(16)}`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  t.is(upgraded.status, 200, await upgraded.text());

  const page = await browser.newPage();
  await page.goto(`${p.url}/console/`);
  await page.screenshot({ path: join(SHOTS, 'sign-in.png'), fullPage: true });
  const form = page.getByRole('form', { name: 'Password sign-in' });
  await form.getByLabel('E-mail').fill(email);
  await form.getByLabel('Password').fill('not-the-password');
  await form.getByRole('button', { name: 'Sign in with password' }).click();
  const refusal = form.getByRole('alert');
  await refusal.waitFor();
  t.regex((await refusal.textContent()) ?? '', /^Error 401: Invalid e-mail or password/);
  t.regex((await refusal.locator('[data-request-id]').textContent()) ?? '', /\S{8,}/);
  t.is(await page.evaluate('sessionStorage.length'), 0, 'nothing kept after a refused sign-in');

  // An address locked after LOGIN_MAX_FAILURES (3 here) failures: the 429 is shown the same way.
  const locked = `locked-${randomBase62(6).toLowerCase()}@example.com`;
  for (let attempt = 1; attempt <= 3; attempt++) {
    await form.getByLabel('E-mail').fill(locked);
    await form.getByLabel('Password').fill(`wrong-${attempt}`);
    // Each attempt waits for its own answer and its own alert (by request id): the alert of the
    // attempt before already reads "Error 401", so waiting for the text alone proves nothing.
    const answered = page.waitForResponse((r) => r.url().endsWith('/llm/auth/login') && r.request().method() === 'POST');
    await form.getByRole('button', { name: 'Sign in with password' }).click();
    const answer = await answered;
    t.is(answer.status(), attempt < 3 ? 401 : 429);
    const requestId = (await answer.headerValue('x-request-id')) ?? '';
    t.regex(requestId, /\S{8,}/);
    await form.getByRole('alert').filter({ hasText: requestId }).waitFor();
  }
  t.regex((await refusal.textContent()) ?? '', /^Error 429: /);
  await page.screenshot({ path: join(SHOTS, 'sign-in-locked.png'), fullPage: true });
  await form.getByLabel('E-mail').fill(email);

  await form.getByLabel('Password').fill(password);
  await form.getByRole('button', { name: 'Sign in with password' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  t.is(await page.locator('header .who').textContent(), email);
  const held = JSON.parse(await page.evaluate("sessionStorage.getItem('console.credential')")) as { kind: string; access: string; refresh: string };
  t.is(held.kind, 'token');
  t.is(await page.evaluate('localStorage.length'), 0);
  t.deepEqual(await browser.cookies(), []);
  t.false(page.url().includes(held.access));

  // An access token the API refuses (as when it expired) is renewed once with the refresh token.
  await page.evaluate(`sessionStorage.setItem('console.credential', ${JSON.stringify(JSON.stringify({ kind: 'token', access: 'expired.access.token', refresh: held.refresh }))})`);
  await page.reload();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  const renewed = JSON.parse(await page.evaluate("sessionStorage.getItem('console.credential')")) as { kind: string; access: string; refresh: string };
  t.is(renewed.kind, 'token');
  t.not(renewed.access, 'expired.access.token');
  t.not(renewed.refresh, held.refresh, 'the refresh token was spent and replaced');

  // A token sign-in may manage its own keys (the API serves /auth/api-keys to bearer tokens only).
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByLabel('Name').fill('my console key');
  await page.getByRole('button', { name: 'Create' }).click();
  const secret = (await page.locator('code.secret').textContent()) ?? '';
  t.regex(secret, /^sk_[0-9A-Za-z]{32}$/);
  await page.locator('tr', { hasText: 'my console key' }).waitFor();
  t.is((await api('/v1/models', { key: secret })).status, 200);
  await page.screenshot({ path: join(SHOTS, 'keys-own.png'), fullPage: true });

  const current = JSON.parse(await page.evaluate("sessionStorage.getItem('console.credential')")) as { refresh: string };
  const loggedOut = page.waitForResponse((r) => r.url().endsWith('/llm/auth/logout'));
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  t.is(await page.evaluate('sessionStorage.length'), 0);
  // Sign-out ended the session at the API: the refresh token the tab held renews nothing now.
  t.is((await loggedOut).status(), 200);
  const reuse = await fetch(`${p.url}/llm/auth/refresh`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: current.refresh }) });
  t.is(reuse.status, 401);
  await page.close();
});

test.serial('a non-admin sees no admin pages, and the API refuses them anyway', async (t) => {
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const token = ((await login.json()) as { access_token: string }).access_token;
  const me = (await (await fetch(`${p.url}/auth/me`, { headers: { authorization: `Bearer ${token}` } })).json()) as { id: string; username: string | null };
  const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: me.id, name: 'guest key', tier: 'free' }) });
  t.is(created.status, 201, JSON.stringify(created.body));
  const key = (created.body as { key: string }).key;

  const { page } = await signedIn(key, { width: 390, height: 844 });
  const links = await page.locator('nav a').allTextContents();
  t.deepEqual(links, ['Playground', 'API keys', 'Usage']);
  await page.locator('select[name=model] option').first().waitFor({ state: 'attached' });
  t.is(await page.locator('header .who').textContent(), me.username ?? '', 'a guest is named by username, not the placeholder e-mail');
  t.true(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), 'nothing wider than the phone screen');
  await page.screenshot({ path: join(SHOTS, 'user-phone.png'), fullPage: true });
  for (const path of ['providers', 'catalog', 'users', 'webhooks', 'mcp-tools', 'requests']) {
    await page.goto(`${p.url}/console/#/${path}`);
    await page.getByRole('heading', { name: 'Page not found' }).waitFor();
  }
  t.is(await page.locator('tr[data-model]').count(), 0);
  // The page's own fetch of an admin endpoint, with the signed-in key, is refused by the API.
  const fromPage = await page.evaluate(async (signedInKey) => {
    const answers: number[] = [];
    for (const path of ['/v1/admin/users', '/v1/admin/webhooks', '/v1/admin/mcp/tools', '/v1/admin/models/catalogs', '/v1/admin/usage', '/v1/admin/requests']) {
      answers.push((await fetch(path, { headers: { 'X-API-Key': signedInKey } })).status);
    }
    return answers;
  }, key);
  t.deepEqual(fromPage, [403, 403, 403, 403, 403, 403]);
  t.is((await api('/v1/admin/providers', { key })).status, 403);
  t.is((await api('/v1/admin/models/provider-models', { key })).status, 403);
  t.is((await api('/v1/admin/usage', { key })).status, 403);
  t.is((await api(`/v1/admin/mcp/tools/anything`, { key, method: 'PATCH', body: JSON.stringify({ enabled: false }) })).status, 403);
  const adminKeys = (await api('/v1/admin/api-keys?limit=1')).body as { data: Array<{ id: string }> };
  t.is((await api(`/v1/admin/api-keys/${adminKeys.data[0]!.id}`, { key, method: 'DELETE' })).status, 403);
  const still = (await api(`/v1/admin/api-keys?limit=100`)).body as { data: Array<{ id: string }> };
  t.true(still.data.some((k) => k.id === adminKeys.data[0]!.id), 'a refused revoke deletes nothing');
  await page.close();
});
