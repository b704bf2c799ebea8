import test from 'ava';
import { DeckError } from '../../services/gateway/deck.js';
import { ConfigError } from '../../services/kit/config.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { startupFailureLine } from '../../services/platform/startup-errors.js';

// What an operator sees when a start fails for a reason they can fix: one line naming the setting
// (startupFailureLine), or null, which keeps the stack trace of a real bug. Unit level here; the
// child-process tests (test/process/startup-refusals.test.ts, standalone-start.test.ts) check the
// same lines reach stderr with exit code 1.

const errno = (fields: Record<string, unknown>) => Object.assign(new Error(String(fields.code)), fields);

test('a bad TRUSTED_PROXIES or EGRESS_ALLOW_HOSTS is a ConfigError naming the setting', (t) => {
  for (const [name, value] of [
    ['TRUSTED_PROXIES', 'foo'],
    ['TRUSTED_PROXIES', '10.0.0.0/abc'],
    ['TRUSTED_PROXIES', '10.0.0.0/33'],
    ['TRUSTED_PROXIES', '10.0.0.0/8/1'],
    ['EGRESS_ALLOW_HOSTS', '10.0.0.0/99'],
  ] as const) {
    const error = t.throws(() => loadBaseConfig({ [name]: value }), { instanceOf: ConfigError }, `${name}=${value}`);
    t.regex(error!.message, new RegExp(`^invalid configuration: ${name}: `));
  }
  t.deepEqual(loadBaseConfig({ TRUSTED_PROXIES: '10.0.0.0/8, ::1, fd00::/8' }).TRUSTED_PROXIES, ['10.0.0.0/8', '::1', 'fd00::/8']);
  t.deepEqual(loadBaseConfig({ EGRESS_ALLOW_HOSTS: 'api.example.com,10.0.0.0/8' }).EGRESS_ALLOW_HOSTS, ['api.example.com', '10.0.0.0/8']);
});

test('MASTER_KEY must be 32 bytes (hex or base64) at parse time, and its value is never echoed', (t) => {
  const error = t.throws(() => loadBaseConfig({ MASTER_KEY: 'not-a-key-but-long-enough-to-pass-a-length-check' }), { instanceOf: ConfigError });
  t.regex(error!.message, /^invalid configuration: MASTER_KEY: /);
  t.false(error!.message.includes('not-a-key'));
  t.is(loadBaseConfig({ MASTER_KEY: 'ab'.repeat(32) }).MASTER_KEY, 'ab'.repeat(32));
  t.truthy(loadBaseConfig({ MASTER_KEY: Buffer.alloc(32, 7).toString('base64') }).MASTER_KEY);
});

test('a GATEWAY_SHARED_SECRET no header can carry (a space, a non-ASCII character) is a ConfigError naming it, never echoing it', (t) => {
  for (const secret of [`${'s'.repeat(32)} x`, `${'s'.repeat(32)}€`]) {
    const error = t.throws(() => loadBaseConfig({ GATEWAY_SHARED_SECRET: secret }), { instanceOf: ConfigError });
    t.regex(error!.message, /^invalid configuration: GATEWAY_SHARED_SECRET: /);
    t.false(error!.message.includes('s'.repeat(32)));
  }
  t.is(loadBaseConfig({ GATEWAY_SHARED_SECRET: 'A-z_0.9~'.repeat(4) }).GATEWAY_SHARED_SECRET, 'A-z_0.9~'.repeat(4));
});

test('the Keycloak settings are all or none: a partial set is one ConfigError naming every missing variable, never a value', (t) => {
  const all = { KEYCLOAK_URL: 'http://127.0.0.1:1', KEYCLOAK_REALM: 'platform', KEYCLOAK_CLIENT_ID: 'backend', KEYCLOAK_CLIENT_SECRET: 's3cret-kc' };
  for (const missing of [['KEYCLOAK_REALM', 'KEYCLOAK_CLIENT_ID', 'KEYCLOAK_CLIENT_SECRET'], ['KEYCLOAK_CLIENT_SECRET'], ['KEYCLOAK_URL'], ['KEYCLOAK_URL', 'KEYCLOAK_CLIENT_ID']]) {
    // An empty variable is unset, as everywhere in the settings.
    const env = { ...all, ...Object.fromEntries(missing.map((name, i) => [name, i === 0 ? '' : undefined])) };
    const error = t.throws(() => loadBaseConfig(env), { instanceOf: ConfigError }, missing.join());
    t.is(error!.variable, missing[0]);
    t.true(error!.message.startsWith(`invalid configuration: ${missing[0]}: `), error!.message);
    t.true(error!.message.endsWith(`(missing: ${missing.join(', ')})`), error!.message);
    t.false(error!.message.includes('\n') || error!.message.includes('s3cret') || error!.message.includes('backend'), error!.message);
  }
  // Without KEYCLOAK_URL the rest used to be ignored in silence (the platform's own sign-in ran instead).
  t.regex(t.throws(() => loadBaseConfig({ KEYCLOAK_CLIENT_SECRET: 's3cret-kc' }))!.message, /^invalid configuration: KEYCLOAK_URL: not set, but KEYCLOAK_CLIENT_SECRET is: /);
  t.is(loadBaseConfig(all).env.KEYCLOAK_REALM, 'platform');
  t.is(loadBaseConfig({}).env.KEYCLOAK_URL, undefined);
});

test('a deck error and a missing deck file name the deck setting', (t) => {
  const config = loadBaseConfig({ EDGE_DECK_FILE: '/nonexistent/kong.yaml' });
  const deck = startupFailureLine(new DeckError('plugin tiered-rate-limit (global): config.fault_policy: expected one of allow, deny'), config);
  t.truthy(deck);
  t.true(deck!.includes('fault_policy') && deck!.includes('DECK_'), deck!);
  const missing = startupFailureLine(errno({ code: 'ENOENT', syscall: 'open', path: '/nonexistent/kong.yaml' }), config);
  t.true(missing?.includes('EDGE_DECK_FILE'), String(missing));
  const relative = loadBaseConfig({ EDGE_DECK_FILE: 'deck/other.yaml' });
  t.true(startupFailureLine(errno({ code: 'ENOENT', syscall: 'open', path: '/srv/app/deck/other.yaml' }), relative)?.includes('EDGE_DECK_FILE'));
  // Another missing file is not the deck's: it keeps its stack trace.
  t.is(startupFailureLine(errno({ code: 'ENOENT', syscall: 'open', path: '/elsewhere/x.json' }), config), null);
});

test('a server that does not answer names its URL setting, never the password', (t) => {
  const config = loadBaseConfig({
    DATABASE_URL: 'postgres://app:s3cret-db@127.0.0.1:1/app',
    AMQP_URL: 'amqp://app:s3cret-mq@127.0.0.1:2',
    REDIS_URL: 'redis://:s3cret-redis@127.0.0.1:3',
  });
  for (const [port, name, shown] of [[1, 'DATABASE_URL', 'postgres://app:***@127.0.0.1:1/app'], [2, 'AMQP_URL', 'amqp://app:***@127.0.0.1:2'], [3, 'REDIS_URL', 'redis://:***@127.0.0.1:3']] as const) {
    const line = startupFailureLine(errno({ code: 'ECONNREFUSED', syscall: 'connect', address: '127.0.0.1', port }), config);
    t.is(line, `cannot connect to 127.0.0.1:${port} (${name}=${shown}): connection refused (ECONNREFUSED); check that the server runs and that ${name} points at it`);
    t.false(/s3cret/.test(line!), line!);
    const late = startupFailureLine(errno({ code: 'ETIMEDOUT', syscall: 'connect', address: '127.0.0.1', port }), config);
    t.true(late?.includes(`(${name}=${shown}): timed out (ETIMEDOUT)`), String(late));
  }
  // A query string may carry credentials too: it is left out.
  const query = loadBaseConfig({ REDIS_URL: 'rediss://127.0.0.1:4/0?password=s3cret' });
  t.is(startupFailureLine(errno({ code: 'ECONNRESET', syscall: 'connect', address: '127.0.0.1', port: 4 }), query)?.split(';')[0], 'cannot connect to 127.0.0.1:4 (REDIS_URL=rediss://127.0.0.1:4/0): connection reset (ECONNRESET)');
  // A PostgreSQL server that accepts and never answers: the pool's wait for a first connection ends.
  const pool = Object.assign(new Error('Knex: Timeout acquiring a connection. The pool is probably full. Are you missing a .transacting(trx) call?'), { name: 'KnexTimeoutError' });
  const stalled = startupFailureLine(pool, loadBaseConfig({ DATABASE_URL: 'postgres://app:s3cret@127.0.0.1:1/app', DATABASE_CONNECT_TIMEOUT_MS: '2000' }));
  t.is(stalled, 'cannot connect to 127.0.0.1:1 (DATABASE_URL=postgres://app:***@127.0.0.1:1/app): timed out (no connection within DATABASE_CONNECT_TIMEOUT_MS, 2000 ms); check that the server runs and that DATABASE_URL points at it');
  t.is(startupFailureLine(pool, loadBaseConfig({})), null, 'the embedded database has no server to name');
  const byName = loadBaseConfig({ DATABASE_URL: 'postgres://app:pw@db.invalid/app' });
  t.true(startupFailureLine(errno({ code: 'ENOTFOUND', syscall: 'getaddrinfo', hostname: 'db.invalid' }), byName)?.includes('DATABASE_URL'));
  // A connection to something no setting names is not the operator's to fix from here.
  t.is(startupFailureLine(errno({ code: 'ECONNREFUSED', syscall: 'connect', address: '127.0.0.1', port: 9 }), config), null);
});

test('credentials a server refuses (EAUTH, with the answer\'s first word) name the setting and say to check them, with every server set, never the password', (t) => {
  const config = loadBaseConfig({
    DATABASE_URL: 'postgres://app:s3cret-db@127.0.0.1:1/app',
    AMQP_URL: 'amqp://app:s3cret-mq@127.0.0.1:2',
    REDIS_URL: 'redis://user:s3cret-redis@127.0.0.1:3',
  });
  const line = startupFailureLine(errno({ code: 'EAUTH', syscall: 'auth', reply: 'WRONGPASS', address: '127.0.0.1', port: 3 }), config);
  t.is(line, 'cannot connect to 127.0.0.1:3 (REDIS_URL=redis://user:***@127.0.0.1:3): authentication refused (WRONGPASS); check the user name and password in REDIS_URL');
  // The other lines keep their advice.
  t.true(startupFailureLine(errno({ code: 'ETIMEDOUT', syscall: 'connect', address: '127.0.0.1', port: 2 }), config)?.endsWith('timed out (ETIMEDOUT); check that the server runs and that AMQP_URL points at it'));
});

test('EACCES is a port problem only when listening; an unwritable DATA_DIR names DATA_DIR', (t) => {
  const config = loadBaseConfig({ DATA_DIR: '/srv/data', GATEWAY_PORT: '80' });
  const port = startupFailureLine(errno({ code: 'EACCES', syscall: 'listen', address: '0.0.0.0', port: 80 }), config);
  t.true(port?.includes('may not be bound'), String(port));
  const dir = startupFailureLine(errno({ code: 'EACCES', syscall: 'mkdir', path: '/srv/data/pglite' }), config);
  t.truthy(dir);
  t.true(dir!.includes('DATA_DIR') && !dir!.includes('port'), dir!);
  t.is(startupFailureLine(errno({ code: 'EACCES', syscall: 'open', path: '/etc/shadow' }), config), null);
});
