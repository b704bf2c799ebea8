import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The console's lists that are longer than one API page (API keys, webhooks, conversations), the
// usage export following the range the chart shows, and the pricing form with a model priced per
// 1k tokens. Debian's Chromium driven by playwright-core against the whole platform, as in
// console.test.ts.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fake: FakeUpstream;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'perk', models: [{ id: 'perk-model' }] });
  // Webhooks may point at loopback (the egress guard refuses it otherwise); a user may hold more
  // keys than one API page (the default is 10 per user).
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', EGRESS_ALLOW_HOSTS: '127.0.0.1', API_KEYS_MAX_PER_USER: '200' } });
  chrome = await openConsoleBrowser();
  browser = chrome.browser;
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
  await fake?.close();
});

const api = async (path: string, init: RequestInit = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': ADMIN_KEY } });
  return { status: res.status, body: (await res.json()) as any };
};

const signedIn = (): Promise<Page> => signIn(browser, p.url, ADMIN_KEY);

test.serial('API keys: more keys than one API page (100) are all listed', async (t) => {
  const me = (await api('/auth/me')).body as { id: string };
  for (let i = 0; i < 101; i++) {
    const created = await api('/v1/admin/api-keys', { method: 'POST', body: JSON.stringify({ user_id: me.id, tier: 'free', name: `paged-${String(i).padStart(3, '0')}` }) });
    t.is(created.status, 201, JSON.stringify(created.body));
  }
  const total = (await api(`/v1/admin/api-keys?user_id=${me.id}&limit=1`)).body.total_count as number;
  t.true(total > 100);

  const page = await signedIn();
  await page.getByRole('link', { name: 'API keys' }).click();
  // The list is drawn once, whole: when its first row is there, every row is.
  await page.locator('table.keys tbody tr[data-key-id]').first().waitFor();
  t.is(await page.locator('table.keys tbody tr[data-key-id]').count(), total);
  t.is(await page.getByRole('button', { name: 'Revoke paged-000' }).count(), 1);
  t.is(await page.getByRole('button', { name: 'Revoke paged-100' }).count(), 1);
  await page.close();
});

test.serial('webhooks: more subscriptions than one API page (100) are all listed', async (t) => {
  for (let i = 0; i < 101; i++) {
    t.is((await api('/v1/admin/webhooks', { method: 'POST', body: JSON.stringify({ url: `http://127.0.0.1:9/paged-${i}`, events: ['model.*'] }) })).status, 201);
  }
  const total = (await api('/v1/admin/webhooks?limit=1')).body.total_count as number;
  t.true(total > 100);

  const page = await signedIn();
  await page.getByRole('link', { name: 'Webhooks' }).click();
  await page.locator('article.webhook').first().waitFor();
  t.is(await page.locator('article.webhook').count(), total);
  t.is(await page.getByRole('article', { name: 'Webhook http://127.0.0.1:9/paged-0' }).count(), 1);
  t.is(await page.getByRole('article', { name: 'Webhook http://127.0.0.1:9/paged-100' }).count(), 1);
  await page.close();
});

test.serial('playground: more conversations than the side panel shows at first are reached with "More conversations"', async (t) => {
  for (let i = 0; i < 21; i++) {
    t.is((await api('/v1/conversations', { method: 'POST', body: JSON.stringify({ title: `paged-conversation-${String(i).padStart(2, '0')}` }) })).status, 200);
  }
  const total = (await api('/v1/conversations?limit=1')).body.total_count as number;
  t.true(total > 20);

  const page = await signedIn();
  const listed = page.locator('.conversations button[data-conversation-id]');
  await listed.first().waitFor();
  t.is(await listed.count(), 20);
  const more = page.getByRole('button', { name: 'More conversations' });
  t.is(await more.count(), 1, 'a button offers the older conversations');
  await more.click();
  await listed.nth(20).waitFor();
  t.is(await listed.count(), total);
  t.is(await more.count(), 0, 'nothing more to show');
  await page.close();
});

test.serial('usage: the CSV export asks for the range the chart shows, not a range typed since without Show', async (t) => {
  const page = await signedIn();
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.locator('.chart > *').first().waitFor();
  const shownFrom = await page.getByLabel('From').inputValue();
  const shownTo = await page.getByLabel('To').inputValue();
  // The range is changed but not shown: the chart still shows the first one.
  await page.getByLabel('From').fill(shownTo);
  const asked = page.waitForRequest((request) => request.url().includes('/v1/admin/usage/export'));
  await page.getByRole('button', { name: 'Export CSV' }).click();
  const query = new URL((await asked).url()).searchParams;
  t.is(query.get('from'), shownFrom);
  t.is(query.get('to'), shownTo);
  t.is(query.get('group_by'), 'day,model');
  await page.close();
});

test.serial('pricing: each price field has a label of its own', async (t) => {
  t.is((await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Perk', vendor: 'fake', base_url: fake.url }) })).status, 201);
  const page = await signedIn();
  await page.getByRole('link', { name: 'Providers and models' }).click();
  await page.getByRole('button', { name: 'Pricing of perk-model' }).click();
  const form = page.getByRole('form', { name: 'Pricing of perk-model' });
  // As console.test.ts finds them: by label, not exact, so no label may contain another one.
  for (const label of ['Prompt, USD per 1M tokens', 'Completion, USD per 1M tokens', 'USD per request']) t.is(await form.getByLabel(label).count(), 1, label);
  t.is(await form.getByRole('spinbutton').count(), 4);
  await page.close();
});

test.serial('pricing: a model priced per 1k tokens shows that price per 1M, and changing it replaces the line (the API refuses two)', async (t) => {
  const model = ((await api('/v1/admin/models/provider-models?limit=100')).body.data as Array<{ id: string; model_public_id: string }>).find((m) => m.model_public_id === 'perk-model')!;
  const lines = [
    { unit: 'per_1k_prompt_tokens', amount_micro_usd: 150, currency: 'USD' },
    { unit: 'per_1k_completion_tokens', amount_micro_usd: 600, currency: 'USD' },
  ];
  t.is((await api(`/v1/admin/models/provider-models/${model.id}`, { method: 'PATCH', body: JSON.stringify({ pricing: { lines } }) })).status, 200);

  const page = await signedIn();
  await page.getByRole('link', { name: 'Providers and models' }).click();
  await page.getByRole('button', { name: 'Pricing of perk-model' }).click();
  const form = page.getByRole('form', { name: 'Pricing of perk-model' });
  // $0.00015 per 1k tokens is $0.15 per 1M.
  t.is(await form.getByLabel('Prompt, USD per 1M tokens').inputValue(), '0.15');
  t.is(await form.getByLabel('Completion, USD per 1M tokens').inputValue(), '0.6');
  await form.getByLabel('Prompt, USD per 1M tokens').fill('0.3');
  await form.getByRole('button', { name: 'Save pricing' }).click();
  // Either the new price in the table or the API's refusal in the form.
  await Promise.race([page.locator('tr[data-model="perk-model"] td.price', { hasText: '$0.3/1M prompt' }).waitFor(), form.getByRole('alert').waitFor()]);
  t.is(await form.getByRole('alert').count(), 0, 'the API accepted the prices');
  const stored = ((await api(`/v1/admin/models/provider-models/${model.id}`)).body.pricing.lines as Array<{ unit: string; amount_micro_usd: number }>).map((l) => `${l.unit}=${l.amount_micro_usd}`).sort();
  // The changed price replaced the per-1k line; the unchanged one kept its own.
  t.deepEqual(stored, ['per_1k_completion_tokens=600', 'per_1m_prompt_tokens=300000']);
  await page.close();
});

test.serial('catalog: a bulk change stopped part-way by an error still shows the entries it changed', async (t) => {
  const stale = await startFakeUpstream({ name: 'stale', models: [{ id: 'stale-first' }, { id: 'stale-trap' }] });
  t.teardown(() => stale.close());
  t.is((await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Stale', vendor: 'fake', base_url: stale.url }) })).status, 201);
  // One entry the console refuses to put in a path (an id as an earlier release stored it, see
  // console-security.test.ts), and one sorted before it, which the bulk button changes first.
  const knex = p.runtime.db.knex;
  const first = '-stale-first';
  const trap = '../../stale-trap';
  for (const [from, to] of [['stale-first', first], ['stale-trap', trap]] as const) {
    t.is(await knex('llm_model_catalogs').where({ public_id: from }).update({ public_id: to }), 1);
    t.is(await knex('llm_provider_models').where({ model_public_id: from }).update({ model_public_id: to }), 1);
  }
  const order = ((await api('/v1/admin/models/catalogs?limit=100')).body.data as Array<{ public_id: string }>).map((e) => e.public_id);
  t.true(order.indexOf(first) < order.indexOf(trap), order.join(', '));

  const page = await signedIn();
  await page.getByRole('link', { name: 'Catalog' }).click();
  const firstState = page.locator(`tr[data-catalog="${first}"] td.state`);
  t.regex((await firstState.textContent()) ?? '', /^enabled/);
  await page.getByRole('button', { name: 'Disable every catalog model' }).click();
  await page.locator('main > div > [role=alert]', { hasText: /path/i }).waitFor();
  t.false((await api(`/v1/admin/models/catalogs/${first}`)).body.active, 'the API disabled the entry before the error');
  // The table follows: the entry changed before the error is shown disabled.
  await page.locator(`tr[data-catalog="${first}"] td.state`, { hasText: /^disabled/ }).waitFor();
  t.regex((await firstState.textContent()) ?? '', /^disabled/);
  await page.close();
});

test.serial('users: a budget below a cent is shown as saved, not rounded to $0.00', async (t) => {
  const email = `cents-${randomBase62(6).toLowerCase()}@example.com`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string; user_id: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
  t.is(upgraded.status, 200);

  const page = await signedIn();
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByLabel('E-mail', { exact: true }).fill(email);
  await page.getByRole('button', { name: 'Find' }).click();
  await page.locator('table.users tbody:not(:has(tr[data-user-id] ~ tr[data-user-id])) tr[data-user-id]', { hasText: email }).waitFor();
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  const form = page.getByRole('form', { name: `Budget of ${email}` });
  await form.getByLabel('Spending budget (USD)').fill('0.004');
  await form.getByRole('button', { name: 'Save budget' }).click();
  const saved = form.getByRole('status');
  await saved.waitFor();
  t.is((await api(`/v1/admin/users/${guest.user_id}`)).body.max_budget_micro_usd, 4000);
  t.is(await saved.textContent(), 'Saved: $0.004 per day; every model.');
  await page.close();
});

test.serial('the skip link moves the focus to the page, which stays on screen', async (t) => {
  const page = await signedIn();
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByRole('heading', { name: 'Usage (everyone)' }).waitFor();
  const url = page.url();
  // The first stop of the keyboard, as a keyboard user meets it.
  await page.keyboard.press('Tab');
  t.is(await page.locator('a.skip:focus').count(), 1, 'the skip link is the first focus stop');
  await page.keyboard.press('Enter');
  await page.locator('main#main:focus').waitFor();
  t.is(await page.getByRole('heading', { name: 'Usage (everyone)' }).count(), 1, 'the page is still shown');
  t.is(await page.getByRole('heading', { name: 'Page not found' }).count(), 0);
  t.is(page.url(), url);
  await page.close();
});
