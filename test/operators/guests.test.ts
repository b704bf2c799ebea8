import test from 'ava';
import OpenAI, { NotFoundError, PermissionDeniedError, type APIError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform } from '../helpers/platform.js';

// Guest controls through the edge: guest login switched off, and the models guests may use.

test('GUEST_LOGIN_ENABLED=false: guest login answers 403 with a clear message', async (t) => {
  const p = await startTestPlatform({ env: { GUEST_LOGIN_ENABLED: 'false', LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  try {
    for (const path of ['/llm/auth/guest-login', '/auth/guest-login']) {
      const res = await fetch(`${p.url}${path}`, { method: 'POST' });
      t.is(res.status, 403, path);
      const body = (await res.json()) as any;
      t.is(body.error.code, 'guest_login_disabled');
      t.regex(body.error.message, /Guest login is disabled/);
    }
    t.is(await p.runtime.db.knex('users').where({ is_guest: true }).count('* as n').first().then((r: any) => Number(r.n)), 0);
  } finally {
    await p.stop();
  }
});

test('GUEST_ALLOWED_MODELS: guests may use only the listed models; keys of members are not limited by it', async (t) => {
  const fake = await startFakeUpstream({ name: 'g', models: [{ id: 'free-small' }, { id: 'paid-large' }] });
  const adminKey = `sk_${randomBase62(32)}`;
  const p = await startTestPlatform({ env: { GUEST_ALLOWED_MODELS: 'free-*', BOOTSTRAP_ADMIN_API_KEY: adminKey, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  try {
    const admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': adminKey, Authorization: null } });
    await admin.post('/admin/providers', { body: { name: 'G', vendor: 'fake', base_url: fake.url } });
    const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
    t.is(login.status, 201);
    const guest = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: ((await login.json()) as any).access_token, maxRetries: 0 });
    const msg = [{ role: 'user' as const, content: 'hi' }];
    await guest.chat.completions.create({ model: 'free-small', messages: msg });
    const denied = await t.throwsAsync(guest.chat.completions.create({ model: 'paid-large', messages: msg }), { instanceOf: PermissionDeniedError });
    t.regex((denied as APIError).message, /'paid-large' is not available to guest accounts/);
    await admin.chat.completions.create({ model: 'paid-large', messages: msg });
    // The model list shows a guest only what it may use; the others do not exist for it.
    t.deepEqual((await guest.models.list()).data.map((m) => m.id), ['free-small']);
    const hidden = await t.throwsAsync(guest.models.retrieve('paid-large'), { instanceOf: NotFoundError });
    t.is((hidden as APIError).code, 'model_not_found');
    t.is((hidden as APIError).param, 'model');
    t.is((await guest.models.retrieve('free-small')).id, 'free-small');
    t.deepEqual((await admin.models.list()).data.map((m) => m.id).sort(), ['free-small', 'paid-large'], 'members are not limited by it');
  } finally {
    await p.stop();
    await fake.close();
  }
});
