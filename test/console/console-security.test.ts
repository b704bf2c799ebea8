import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { openConsoleBrowser, signIn } from './browser.js';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The console as an attacker would meet it: text a provider controls (a model id from a sync)
// must never steer the admin's credential to another endpoint, and a page of another origin that
// opened the console must keep no handle on its tab. Debian's Chromium driven by playwright-core
// against the whole platform, as in console.test.ts.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let victim: FakeUpstream;
let hostile: FakeUpstream;
let browser: BrowserContext;
let chrome: Awaited<ReturnType<typeof openConsoleBrowser>>;

test.before(async () => {
  victim = await startFakeUpstream({ name: 'victim', models: [{ id: 'victim-model' }] });
  hostile = await startFakeUpstream({ name: 'hostile', models: [] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  chrome = await openConsoleBrowser();
  browser = chrome.browser;
});
test.after.always(async () => {
  await chrome?.close();
  await p?.stop();
  await victim?.close();
  await hostile?.close();
});

const api = async (path: string, init: RequestInit = {}) => {
  const res = await fetch(`${p.url}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-api-key': ADMIN_KEY } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
};

const signedIn = (): Promise<Page> => signIn(browser, p.url, ADMIN_KEY);

test.serial("a model id made of dot segments cannot steer the admin's catalog buttons to another endpoint", async (t) => {
  const registered = await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Victim', vendor: 'fake', base_url: victim.url }) });
  t.is(registered.status, 201);
  const victimId = registered.body.id as string;
  // A "model" whose id, as a URL path, climbs out of the catalog. The sync skips such an id now, so
  // the entry is written as an earlier release stored it: the console must refuse it all the same.
  const trap = `../../providers/${victimId}`;
  hostile.setModels([{ id: 'hostile-model' }]);
  t.is((await api('/v1/admin/providers', { method: 'POST', body: JSON.stringify({ name: 'Hostile', vendor: 'fake', base_url: hostile.url }) })).status, 201);
  const knex = p.runtime.db.knex;
  t.is(await knex('llm_model_catalogs').where({ public_id: 'hostile-model' }).update({ public_id: trap }), 1);
  t.is(await knex('llm_provider_models').where({ model_public_id: 'hostile-model' }).update({ model_public_id: trap }), 1);

  const seen: string[] = [];
  const page = await signedIn();
  page.on('request', (request) => {
    if (request.method() === 'PATCH') seen.push(new URL(request.url()).pathname);
  });
  await page.goto(`${p.url}/console/#/catalog`);
  const row = page.locator('tr', { has: page.getByRole('button', { name: `Disable catalog entry ${trap}` }) });
  const patched = page.waitForResponse((response) => response.request().method() === 'PATCH');
  patched.catch(() => undefined); // the page closes with it still waiting when nothing is sent
  await row.getByRole('button', { name: `Disable catalog entry ${trap}` }).click();
  // Whichever comes first: the refusal in place, or a PATCH leaving the page.
  await Promise.race([row.getByRole('alert').waitFor(), patched]);
  t.true((await api(`/v1/admin/providers/${victimId}`)).body.active, 'the other provider is still active');
  t.deepEqual(seen, [], 'no PATCH left the page');
  // The action is refused in place, before any request leaves the page.
  t.regex((await row.getByRole('alert').textContent()) ?? '', /path/i);

  // The bulk button meets the same entry: it stops there with the error, and nothing else is touched.
  await page.getByRole('button', { name: 'Disable every catalog model' }).click();
  // (its error goes under the bulk buttons, not in a row)
  await page.locator('main > div > [role=alert]', { hasText: /path/i }).waitFor();

  t.true((await api(`/v1/admin/providers/${victimId}`)).body.active, 'the other provider is still active');
  t.false(seen.includes(`/v1/admin/providers/${victimId}`), `no PATCH reached the provider: ${seen.join(', ')}`);
  await page.close();
});

test.serial('a page of another origin that opened the console keeps no handle on it (Cross-Origin-Opener-Policy)', async (t) => {
  // Without it, the opener could later send the signed-in tab to a look-alike sign-in page.
  const attacker = await browser.newPage();
  await attacker.goto(`${victim.url}/models`);
  const popup = attacker.waitForEvent('popup');
  await attacker.evaluate(`window.__console = window.open(${JSON.stringify(`${p.url}/console/`)}, '_blank')`);
  const opened = await popup;
  await opened.getByLabel('API key').waitFor();
  t.is(await opened.evaluate('window.opener'), null, 'the console has no opener');
  t.true(await attacker.evaluate('window.__console.closed'), "the opener's handle is severed");
  await opened.close();
  await attacker.close();
  for (const path of ['/console/', '/console/main.js']) t.is((await fetch(`${p.url}${path}`)).headers.get('cross-origin-opener-policy'), 'same-origin', path);
});
