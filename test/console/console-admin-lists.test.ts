import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The admin console's forms and lists keep what they do not show: a user's budget period, an
// endpoint's administrative switch, the catalog entries' own flag for the bulk buttons, and every
// page of a list longer than one API page. Debian's Chromium driven by playwright-core against
// the whole platform, as in console.test.ts.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const MANY = Array.from({ length: 130 }, (_, i) => ({ id: `pg-${String(i).padStart(3, '0')}` }));
let p: TestPlatform;
let many: FakeUpstream;
let small: FakeUpstream;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  many = await startFakeUpstream({ name: 'many', models: MANY });
  small = await startFakeUpstream({ name: 'small', models: [{ id: 'sw-model' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  chrome = await openConsoleBrowser();
  browser = chrome.browser;
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
  await many?.close();
  await small?.close();
});

const api = async (path: string, init: RequestInit = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': ADMIN_KEY } });
  return { status: res.status, body: (await res.json()) as any };
};

const signedIn = (): Promise<Page> => signIn(browser, p.url, ADMIN_KEY);

/** The row of the user with this e-mail, once the list shows that user alone (a search's answer). */
function onlyUserRow(page: Page, email: string) {
  return page.locator('table.users tbody:not(:has(tr[data-user-id] ~ tr[data-user-id])) tr[data-user-id]', { hasText: email });
}

test.serial('users: the budget form shows the stored budget and sends only the fields changed (a monthly budget stays monthly)', async (t) => {
  const email = `budget-${randomBase62(6).toLowerCase()}@example.com`;
  const guest = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string; user_id: string };
  const upgraded = await fetch(`${p.url}/auth/upgrade`, { method: 'POST', headers: { authorization: `Bearer ${guest.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
  t.is(upgraded.status, 200);
  const set = await api(`/v1/admin/users/${guest.user_id}`, { method: 'PATCH', body: JSON.stringify({ budget_period: 'month', max_budget_micro_usd: 100_000_000, max_tokens: 5000, allowed_models: ['gpt-4o*', 'llama-*'] }) });
  t.is(set.status, 200);

  const page = await signedIn();
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByLabel('E-mail', { exact: true }).fill(email);
  await page.getByRole('button', { name: 'Find' }).click();
  // The search's own answer (one user), not the first load's list, which it replaces. A locator
  // wait, not waitForFunction: the console's CSP forbids the eval that a string predicate needs.
  await onlyUserRow(page, email).waitFor();
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  const form = page.getByRole('form', { name: `Budget of ${email}` });
  // The form starts from the stored values.
  t.is(await form.getByLabel('Spending budget (USD)').inputValue(), '100');
  t.is(await form.getByLabel('Budget period').inputValue(), 'month');
  t.is(await form.getByLabel('Token budget').inputValue(), '5000');
  t.is(await form.getByLabel('Allowed models').inputValue(), 'gpt-4o*, llama-*');

  // Another administrator changes the token budget while the form is open; this form changes only
  // the allow-list, so only the allow-list is sent and the other change survives.
  t.is((await api(`/v1/admin/users/${guest.user_id}`, { method: 'PATCH', body: JSON.stringify({ max_tokens: 7000 }) })).status, 200);
  await form.getByLabel('Allowed models').fill('gpt-4o*');
  await form.getByRole('button', { name: 'Save budget' }).click();
  await page.getByText('Saved: $100.00 per month; 7000 tokens per month; models: gpt-4o*.').waitFor();
  t.like((await api(`/v1/admin/users/${guest.user_id}`)).body, { budget_period: 'month', max_budget_micro_usd: 100_000_000, max_tokens: 7000, allowed_models: ['gpt-4o*'] });
  t.is(await form.getByLabel('Token budget').inputValue(), '7000', 'the form shows what was saved');

  // Nothing changed: nothing is sent.
  await form.getByRole('button', { name: 'Save budget' }).click();
  await page.getByText('Nothing to change: the form shows the stored budget.').waitFor();

  // Choosing the period changes it; emptying the token budget removes it.
  await form.getByLabel('Budget period').selectOption('day');
  await form.getByLabel('Token budget').fill('');
  await form.getByRole('button', { name: 'Save budget' }).click();
  await page.getByText('Saved: $100.00 per day; models: gpt-4o*.').waitFor();
  t.like((await api(`/v1/admin/users/${guest.user_id}`)).body, { budget_period: 'day', max_budget_micro_usd: 100_000_000, max_tokens: null, allowed_models: ['gpt-4o*'] });

  // Closed and opened again: the saved values.
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  t.is(await form.getByLabel('Budget period').inputValue(), 'day');
  t.is(await form.getByLabel('Token budget').inputValue(), '');

  // "Clear" removes the budget and the allow-list, and the form shows them gone.
  await form.getByRole('button', { name: 'Clear budget and allow-list' }).click();
  await page.getByText('Saved: every model.').waitFor();
  t.like((await api(`/v1/admin/users/${guest.user_id}`)).body, { max_budget_micro_usd: null, max_tokens: null, allowed_models: null });
  t.is(await form.getByLabel('Spending budget (USD)').inputValue(), '');
  t.is(await form.getByLabel('Allowed models').inputValue(), '');

  // A fresh page: the list answers the stored values, so the form starts from them again.
  t.is((await api(`/v1/admin/users/${guest.user_id}`, { method: 'PATCH', body: JSON.stringify({ max_budget_micro_usd: 2_500_000 }) })).status, 200);
  await page.reload();
  await page.getByLabel('E-mail', { exact: true }).fill(email);
  await page.getByRole('button', { name: 'Find' }).click();
  await onlyUserRow(page, email).waitFor();
  await page.getByRole('button', { name: `Budget of ${email}` }).click();
  t.is(await form.getByLabel('Spending budget (USD)').inputValue(), '2.5');
  t.is(await form.getByLabel('Budget period').inputValue(), 'day');
  await page.close();
});

test.serial('providers: the endpoint editor keeps an endpoint switched off', async (t) => {
  const second = await startFakeUpstream({ name: 'second', models: [{ id: 'sw-model' }] });
  try {
    const reg = await api('/v1/admin/providers', {
      method: 'POST',
      body: JSON.stringify({ name: 'Switched', vendor: 'fake', endpoints: [{ url: small.url }, { url: second.url, priority: 1, enabled: false }] }),
    });
    t.is(reg.status, 201);
    const page = await signedIn();
    await page.getByRole('link', { name: 'Providers and models' }).click();
    await page.getByRole('button', { name: 'Edit Switched' }).click();
    const form = page.getByRole('form', { name: 'Edit Switched' });
    const text = form.getByLabel(/^Endpoints/);
    t.is(await text.inputValue(), `${small.url} 0 1\n${second.url} 1 1 off`);
    // Change the first endpoint's weight only.
    await text.fill(`${small.url} 0 4\n${second.url} 1 1 off`);
    await form.getByRole('button', { name: 'Save provider' }).click();
    await page.getByText('Saved Switched.').waitFor();
    const view = (await api(`/v1/admin/providers/${reg.body.id}`)).body;
    t.deepEqual(view.endpoints.map((e: any) => [e.url, e.weight, e.enabled]), [
      [small.url, 4, true],
      [second.url, 1, false],
    ]);
    await page.close();
  } finally {
    await second.close();
  }
});

test.serial('catalog: the bulk buttons change the same flag as the row buttons and the status column', async (t) => {
  const page = await signedIn();
  await page.getByRole('link', { name: 'Catalog' }).click();
  const row = page.locator('tr[data-catalog="sw-model"]');
  await row.waitFor();
  await page.getByRole('button', { name: 'Disable catalog entry sw-model' }).click();
  await page.locator('tr[data-catalog="sw-model"] td.state', { hasText: 'disabled' }).waitFor();
  t.false((await api('/v1/admin/models/catalogs/sw-model')).body.active);

  await page.getByRole('button', { name: 'Enable every catalog model' }).click();
  await page.locator('tr[data-catalog="sw-model"] td.state', { hasText: 'enabled' }).waitFor();
  t.true((await api('/v1/admin/models/catalogs/sw-model')).body.active);

  await page.getByRole('button', { name: 'Disable every catalog model' }).click();
  await page.locator('tr[data-catalog="sw-model"] td.state', { hasText: 'disabled' }).waitFor();
  const entries = (await api('/v1/admin/models/catalogs?limit=100')).body;
  t.true(entries.data.length > 0);
  t.true(entries.data.every((e: any) => e.active === false));
  t.is(await page.locator('table.catalog td.state', { hasText: /^enabled/ }).count(), 0);

  await page.getByRole('button', { name: 'Enable every catalog model' }).click();
  await page.locator('tr[data-catalog="sw-model"] td.state', { hasText: 'enabled' }).waitFor();
  await page.close();
});

test.serial('lists longer than one API page are shown whole: providers, models, catalog, usage', async (t) => {
  // 130 models from one provider (more than the API's largest page of 100), and 22 providers (more
  // than its default page of 20).
  t.is((await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Many', vendor: 'fake', base_url: many.url }) })).status, 201);
  for (let i = 0; i < 20; i++) {
    t.is((await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: `extra-${String(i).padStart(2, '0')}`, vendor: 'fake', base_url: small.url }) })).status, 201);
  }
  const providers = (await api('/v1/admin/providers?limit=100')).body;
  const models = (await api('/v1/admin/models/provider-models?limit=100')).body;
  const catalog = (await api('/v1/admin/models/catalogs?limit=100')).body;
  t.true(providers.total_count > 20 && models.total_count > 100 && catalog.total_count > 100);

  const page = await signedIn();
  await page.getByRole('link', { name: 'Providers and models' }).click();
  await page.locator('tr[data-model="pg-129"]').waitFor();
  t.is(await page.locator('table.providers tbody tr[data-provider-id]').count(), providers.total_count);
  t.is(await page.locator('table.models tbody tr[data-model]').count(), models.total_count);

  await page.getByRole('link', { name: 'Catalog' }).click();
  await page.locator('tr[data-catalog="pg-129"]').waitFor();
  t.is(await page.locator('table.catalog tbody tr[data-catalog]').count(), catalog.total_count);

  // Usage: 40 users × 30 days = 1200 rows, more than the API's page of 1000; the range's last day is drawn.
  const knex = p.runtime.db.knex;
  const day = (back: number) => new Date(Date.now() - back * 86_400_000).toISOString().slice(0, 10);
  const rows = [];
  for (let d = 0; d < 30; d++) {
    for (let u = 0; u < 40; u++) {
      rows.push({ day: day(d), user_id: `user_paging${String(u).padStart(2, '0')}`, api_key_id: '', model: 'm', provider_id: 'p', project_id: '', requests: 1, prompt_tokens: 1, completion_tokens: 1, reasoning_tokens: 0, cost_micro_usd: 1 });
    }
  }
  for (let i = 0; i < rows.length; i += 500) await knex('llm_usage_daily').insert(rows.slice(i, i + 500));
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.getByLabel('Stack by').selectOption('user');
  const lastBar = page.locator(`svg.usage-chart[data-stack=user] rect[data-day="${day(0)}"][data-user="user_paging39"]`);
  await lastBar.waitFor();
  t.is(await page.locator('svg.usage-chart[data-stack=user] rect[data-user^="user_paging"]').count(), 1200);
  await page.close();
});
