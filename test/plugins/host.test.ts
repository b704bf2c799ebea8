import test from 'ava';
import { runPlugin, type HostIO } from '../../plugins/core/host.js';
import type { Decision, EdgeRequest, PluginCore, VerifiedIdentity } from '../../plugins/core/types.js';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';

// The one plugin runner, against a host whose effects are plain values (the embedded edge) and one
// whose effects are promises (Kong's PDK): the same effects in the same order, and no promise at all
// when nothing had to wait.

const identity: VerifiedIdentity = { authMethod: 'apikey', userId: 'user_1', subject: 'user_1', email: null, username: null, isGuest: false, tier: null, limits: null, bucket: 'key:x' };

const request = (headers: Record<string, string> = {}): EdgeRequest => ({ method: 'POST', path: '/v1/chat/completions', headers, clientIp: '127.0.0.1', shared: { requestId: 'req_1' } });

/** Records every effect; with `async`, each effect is a promise that settles on a later turn, recorded again when it has. */
function recordingIO(options: { async: boolean; anonymousExists?: boolean }) {
  const log: string[] = [];
  const effect = (name: string, value: unknown = undefined) => {
    log.push(name);
    if (!options.async) return value;
    return new Promise((resolve) => setImmediate(() => {
      log.push(`${name} settled`);
      resolve(value);
    }));
  };
  const io: HostIO = {
    setUpstreamHeaders: (set) => effect(`set ${Object.keys(set).join(',')}`),
    clearUpstreamHeader: (name) => effect(`clear ${name}`),
    setResponseHeaders: (set) => effect(`respond ${Object.keys(set).join(',')}`),
    authenticate: (as) => effect('identity' in as ? 'authenticate identity' : `authenticate ${as.anonymous}`, 'identity' in as || options.anonymousExists !== false) as boolean | Promise<boolean>,
    saveShared: () => effect('save'),
    exit: (status, body) => effect(`exit ${status} ${JSON.stringify(body)}`),
  };
  return { io, log };
}

const core = (decide: () => Decision | Promise<Decision>): PluginCore => ({ access: decide });
const context = { name: 'probe', requestId: 'req_1', logger: { warn() {}, error() {} } };

const fullDecision: Decision = {
  kind: 'continue',
  identity,
  removeUpstream: ['x-api-key', 'authorization'],
  setUpstream: { 'x-user-id': 'user_1' },
  responseHeaders: { 'x-ratelimit-limit': '10' },
};
const effectsInOrder = ['save', 'authenticate identity', 'clear x-api-key', 'clear authorization', 'set x-user-id', 'respond x-ratelimit-limit'];

test('a plain decision on a host with plain effects is applied at once: the answer is a boolean, not a promise', (t) => {
  const { io, log } = recordingIO({ async: false });
  const req = request();
  const passed = runPlugin(core(() => fullDecision), 'access', req, io, context);
  t.is(passed, true);
  t.deepEqual(log, effectsInOrder);
  t.is(req.shared.apikey, identity);
  t.false(req.shared.anonymous);
});

test('on a host whose effects are promises, each effect starts only after the one before it settled, in the same order', async (t) => {
  const { io, log } = recordingIO({ async: true });
  const passed = runPlugin(core(() => fullDecision), 'access', request(), io, context);
  t.true(passed instanceof Promise);
  t.true(await passed);
  t.deepEqual(log, effectsInOrder.flatMap((name) => [name, `${name} settled`]));
});

test('a decision that is a promise is applied once it settles, through the same effects', async (t) => {
  const { io, log } = recordingIO({ async: false });
  const passed = runPlugin(core(() => Promise.resolve(fullDecision)), 'access', request(), io, context);
  t.true(passed instanceof Promise);
  t.true(await passed);
  t.deepEqual(log, effectsInOrder);
});

test('a refusal answers through exit with the request id, and stops the chain', async (t) => {
  for (const async of [false, true]) {
    const { io, log } = recordingIO({ async });
    const deny: Decision = { kind: 'respond', status: 429, body: { error: { message: 'slow down' } } };
    const passed = runPlugin(core(() => deny), 'access', request(), io, context);
    t.is(typeof passed === 'boolean', !async);
    t.false(await passed);
    t.is(log[0], 'exit 429 {"error":{"message":"slow down","request_id":"req_1"}}');
  }
});

test('an anonymous consumer the host does not know answers 500, on either kind of host; a known one continues', async (t) => {
  const anonymous: Decision = { kind: 'continue', anonymous: 'anon', responseHeaders: { 'x-ratelimit-limit': '10' } };
  for (const async of [false, true]) {
    const missing = recordingIO({ async, anonymousExists: false });
    t.false(await runPlugin(core(() => anonymous), 'access', request(), missing.io, context));
    const effects = missing.log.filter((line) => !line.endsWith('settled'));
    t.deepEqual(effects.slice(0, 2), ['save', 'authenticate anon']);
    t.is(effects.length, 3);
    t.regex(effects[2]!, /^exit 500 .*anonymous consumer missing.*"request_id":"req_1"/);
    const known = recordingIO({ async, anonymousExists: true });
    t.true(await runPlugin(core(() => anonymous), 'access', request(), known.io, context));
    t.deepEqual(known.log.filter((line) => !line.endsWith('settled')), ['save', 'authenticate anon', 'respond x-ratelimit-limit']);
  }
});

test('a plugin that throws, or whose decision rejects, answers 500 and never lets the request through', async (t) => {
  for (const decide of [() => { throw new Error('boom'); }, () => Promise.reject(new Error('boom'))]) {
    const { io, log } = recordingIO({ async: false });
    const errors: unknown[] = [];
    t.false(await runPlugin(core(decide), 'access', request(), io, { ...context, logger: { warn() {}, error: (fields) => errors.push(fields) } }));
    t.true(log[0]!.startsWith('exit 500 '));
    t.is(log.length, 1);
    t.is(errors.length, 1);
  }
});

test('the plugins answer without a promise on the common path: a cached API key, in-process counters', async (t) => {
  const store = createLocalStore();
  const hit = store.hit([{ key: 'k', limit: 2, ttlMs: 60_000 }], Date.now());
  t.false(hit instanceof Promise);
  t.deepEqual(hit, { allowed: true, counts: [1], blocked: -1 });

  let validations = 0;
  const auth = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: 'http://127.0.0.1:9/auth/validate-api-key' }), {
    validate: async () => {
      validations++;
      return { kind: 'valid', key: { user_id: 'user_1', key_id: 'key_1' } };
    },
  });
  const key = `sk_${'a'.repeat(32)}`;
  const first = auth.access(request({ 'x-api-key': key }));
  t.true(first instanceof Promise, 'the first sight of a key asks the validator');
  t.is(((await first) as { identity?: VerifiedIdentity }).identity?.userId, 'user_1');
  const second = auth.access(request({ 'x-api-key': key }));
  t.false(second instanceof Promise, 'a cached key is answered at once');
  t.is((second as { identity?: VerifiedIdentity }).identity?.userId, 'user_1');
  t.is(validations, 1);
  await auth.close();
});
