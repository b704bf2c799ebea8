import test from 'ava';
import { createIdentityHeaders } from '../../plugins/identity-headers/core.js';
import { parseIdentityHeadersConfig } from '../../plugins/identity-headers/schema.js';
import type { Continue, Decision, EdgeRequest, VerifiedIdentity } from '../../plugins/core/types.js';
import { KONG_SPOOF } from './fakes.js';

const core = createIdentityHeaders(parseIdentityHeadersConfig({ gateway_token: 'secret-token' }));
const identity = (authMethod: 'jwt' | 'apikey', userId: string): VerifiedIdentity => ({
  authMethod,
  userId,
  subject: `sub-${userId}`,
  email: `${userId}@example.test`,
  username: userId,
  isGuest: false,
  bucket: `user:${userId}`,
});
const run = (headers: Record<string, string>, shared: EdgeRequest['shared'] = {}) =>
  core.access({ method: 'GET', path: '/v1/models', headers, clientIp: '1.2.3.4', shared }) as Continue;

/** The upstream headers after the decision is applied (remove, then set), as both hosts do. */
function upstream(headers: Record<string, string>, decision: Continue): Record<string, string> {
  const out = { ...headers };
  for (const name of decision.removeUpstream ?? []) delete out[name];
  return { ...out, ...decision.setUpstream };
}

test('spoofed identity headers never reach a service, even without any credential', (t) => {
  const spoofed = {
    'x-user-id': 'admin',
    'x-user-email': 'root@example.test',
    'x-user-subject': 'admin',
    'x-user-username': 'admin',
    'x-user-anything': '1',
    'x-auth-method': 'jwt',
    'x-gateway-token': 'forged',
    'x-gateway-whatever': 'x',
    'x-api-key': 'sk_should_not_leak',
    accept: 'application/json',
  };
  const decision = run(spoofed);
  const out = upstream(spoofed, decision);
  t.deepEqual(out, { accept: 'application/json', 'x-gateway-token': 'secret-token' });
});

test('a configuration that lists nothing to strip still strips the identity, the gateway token and the project header', (t) => {
  const bare = createIdentityHeaders(parseIdentityHeadersConfig({ strip_header_prefixes: [], strip_headers: [] }));
  const spoofed = {
    'x-user-id': 'admin',
    'x-user-key-id': 'key_other',
    'x-auth-method': 'apikey',
    'x-gateway-token': 'forged',
    'x-gateway-project-id': 'proj_someone_elses',
    'x-api-key': 'sk_kept_when_not_listed',
    accept: 'application/json',
  };
  const decision = bare.access({ method: 'GET', path: '/v1/models', headers: spoofed, clientIp: '1.2.3.4', shared: {} }) as Continue;
  t.deepEqual(upstream(spoofed, decision), { 'x-api-key': 'sk_kept_when_not_listed', accept: 'application/json' });
  // Naming one of them in Connection (Kong would clear it after the access phase) is refused too.
  const named = bare.access({ method: 'GET', path: '/', headers: { connection: 'x-gateway-project-id' }, clientIp: '', shared: {} });
  t.like(named, { kind: 'respond', status: 400 });
});

test('a client-sent Forwarded header (any case) is removed by default: no host rewrites it, so neither passes it on', (t) => {
  const sent = { Forwarded: 'for=203.0.113.66;proto=https', 'x-real-ip': '203.0.113.66', accept: 'application/json' };
  const decision = run(sent);
  t.deepEqual(decision.removeUpstream, ['forwarded']);
  // X-Real-IP is the host's to set (Kong's nginx, the embedded edge), from the address it derived.
  t.false(decision.removeUpstream!.includes('x-real-ip'));
  // An operator can keep it by listing the headers to strip without it.
  const keeping = createIdentityHeaders(parseIdentityHeadersConfig({ strip_headers: ['x-auth-method', 'x-api-key'] }));
  t.deepEqual((keeping.access({ method: 'GET', path: '/', headers: sent, clientIp: '', shared: {} }) as Continue).removeUpstream, []);
});

test('identity headers come from the verified identity only', (t) => {
  const headers = { 'x-user-id': 'admin', 'x-auth-method': 'jwt' };
  const out = upstream(headers, run(headers, { apikey: identity('apikey', 'user_real') }));
  t.deepEqual(out, {
    'x-gateway-token': 'secret-token',
    'x-auth-method': 'apikey',
    'x-user-id': 'user_real',
    'x-user-subject': 'sub-user_real',
    'x-user-email': 'user_real@example.test',
    'x-user-username': 'user_real',
  });
});

test('with a token and a key of the same user the method is jwt', (t) => {
  const out = upstream({}, run({}, { jwt: identity('jwt', 'user_a'), apikey: identity('apikey', 'user_a') }));
  t.is(out['x-auth-method'], 'jwt');
  t.is(out['x-user-id'], 'user_a');
});

test('missing email and username are not sent (no empty headers)', (t) => {
  const id = { ...identity('jwt', 'user_b'), email: null, username: null };
  const out = upstream({}, run({}, { jwt: id }));
  t.false('x-user-email' in out);
  t.false('x-user-username' in out);
});

test('without a configured gateway token none is set', (t) => {
  const bare = createIdentityHeaders(parseIdentityHeadersConfig({}));
  const decision = bare.access({ method: 'GET', path: '/', headers: { 'x-gateway-token': 'forged' }, clientIp: '', shared: {} }) as Continue;
  t.deepEqual(decision.removeUpstream, ['x-gateway-token']);
  t.deepEqual(decision.setUpstream, {});
});

test('an API key identity carries its key id upstream; a client-sent key id never passes', (t) => {
  const spoofed = { 'x-user-key-id': 'key_forged' };
  const withKey = upstream(spoofed, run(spoofed, { apikey: { ...identity('apikey', 'user_k'), keyId: 'key_real' } }));
  t.is(withKey['x-user-key-id'], 'key_real');
  const withToken = upstream(spoofed, run(spoofed, { jwt: { ...identity('jwt', 'user_j'), keyId: 'key_ignored' } }));
  t.false('x-user-key-id' in withToken);
});

test("the anonymous refusal names the header of a lone refused credential, and none when several were refused", (t) => {
  const refusing = createIdentityHeaders(parseIdentityHeadersConfig({ refuse_anonymous: true }));
  const refuse = (failures: NonNullable<EdgeRequest['shared']['failures']>) =>
    refusing.access({ method: 'GET', path: '/v1/models', headers: {}, clientIp: '1.2.3.4', shared: { anonymous: true, failures } }) as Decision;
  const errorOf = (decision: Decision) => (decision.kind === 'respond' ? (decision.body as { error: { message: string; param: string | null } }).error : null);
  const key = { method: 'apikey' as const, status: 401 as const, message: 'Invalid API key', param: 'X-Gateway-Key' };
  t.like(errorOf(refuse([key])), { message: 'Invalid API key', param: 'X-Gateway-Key' });
  const token = { method: 'jwt' as const, status: 401 as const, message: 'Token expired' };
  t.like(errorOf(refuse([token, key])), { message: 'Token expired; Invalid API key', param: null });
  t.like(errorOf(refuse([token])), { param: null });
});

// Kong clears every header a request's `Connection` names after the access phase (its runloop's
// "clear hop-by-hop request headers"), so the headers this plugin sets would be dropped on the way.
test('a Connection header naming a header the edge sets or strips is refused (400), in any case, repeated or not', (t) => {
  const apikey = { ...identity('apikey', 'user_k'), keyId: 'key_budgeted' };
  for (const connection of ['X-User-Key-Id', 'keep-alive, x-user-key-id', 'close,X-Gateway-Token', 'X-AUTH-METHOD', ' x-user-id ', 'x-user-whatever', 'x-api-key']) {
    const decision = core.access({ method: 'POST', path: '/v1/chat/completions', headers: { connection }, clientIp: '1.2.3.4', shared: { apikey } }) as Decision;
    t.is(decision.kind, 'respond', connection);
    if (decision.kind !== 'respond') continue;
    t.is(decision.status, 400);
    t.like((decision.body as { error: object }).error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'Connection' });
  }
  // Kong's multimap: a repeated Connection header is a list of lines.
  const repeated = core.access({ method: 'GET', path: '/v1/models', headers: { connection: ['keep-alive', 'X-User-Email'] }, clientIp: '1.2.3.4', shared: { apikey } }) as Decision;
  t.is(repeated.kind, 'respond');
  // Ordinary connection options pass.
  for (const connection of ['keep-alive', 'close', 'Upgrade', 'keep-alive, te', 'x-custom-hop']) {
    t.is((core.access({ method: 'GET', path: '/v1/models', headers: { connection }, clientIp: '1.2.3.4', shared: { apikey } }) as Decision).kind, 'continue', connection);
  }
});

test("Kong's own identity headers sent by a client are stripped by default (Kong passes them on for our plugins)", (t) => {
  // Header names reach the cores lower-case on both hosts.
  const spoofed: Record<string, string> = { accept: 'application/json' };
  for (const [name, value] of Object.entries(KONG_SPOOF)) spoofed[name.toLowerCase()] = value;
  t.deepEqual(upstream(spoofed, run(spoofed)), { accept: 'application/json', 'x-gateway-token': 'secret-token' });
  const withIdentity = upstream(spoofed, run(spoofed, { apikey: identity('apikey', 'user_k') }));
  for (const name of Object.keys(KONG_SPOOF)) t.false(name.toLowerCase() in withIdentity, name);
  t.is(withIdentity['x-user-id'], 'user_k');
});

test('strip_kong_consumer_headers: false leaves them to Kong’s bundled auth plugins, which set them before this plugin runs', (t) => {
  const mixed = createIdentityHeaders(parseIdentityHeadersConfig({ strip_kong_consumer_headers: false }));
  const set = { 'x-consumer-id': 'set-by-key-auth', 'x-credential-identifier': 'cred', 'x-user-id': 'admin' };
  const decision = mixed.access({ method: 'GET', path: '/', headers: set, clientIp: '', shared: {} }) as Continue;
  t.deepEqual(upstream(set, decision), { 'x-consumer-id': 'set-by-key-auth', 'x-credential-identifier': 'cred' });
  t.throws(() => parseIdentityHeadersConfig({ strip_kong_consumer_headers: 'yes' }), { message: /strip_kong_consumer_headers/ });
});
