import test from 'ava';
import { loadCatalogConfig } from '../../domains/catalog/index.js';
import { ConfigError, loadBaseConfig } from '../../services/kit/index.js';
import { cleanEnv, entryArgs, startChild } from '../helpers/process.js';

test('a malformed setting is rejected naming the variable', (t) => {
  const error = t.throws(() => loadBaseConfig({ LLM_API_PORT: 'eighty' }), { instanceOf: ConfigError });
  t.is(error!.variable, 'LLM_API_PORT');
  t.regex(error!.message, /^invalid configuration: LLM_API_PORT: .*\(got "eighty"\)$/);
});

test('every *_MS setting is refused past the longest a timer waits (2^31-1 ms), which Node would fire after 1 ms', (t) => {
  const error = t.throws(() => loadCatalogConfig({ LLM_PROVIDER_SYNC_INTERVAL_MS: String(30 * 86_400_000) }), { instanceOf: ConfigError });
  t.is(error!.variable, 'LLM_PROVIDER_SYNC_INTERVAL_MS');
  t.regex(error!.message, /at most 2147483647 ms/);
  t.is(loadCatalogConfig({ LLM_PROVIDER_SYNC_INTERVAL_MS: '2147483647' }).LLM_PROVIDER_SYNC_INTERVAL_MS, 2_147_483_647);
});

test('secrets are never echoed in configuration errors', (t) => {
  const error = t.throws(() => loadBaseConfig({ GATEWAY_SHARED_SECRET: 'short-secret' }), { instanceOf: ConfigError });
  t.is(error!.variable, 'GATEWAY_SHARED_SECRET');
  t.false(error!.message.includes('short-secret'));
});

test('defaults need no environment, and empty variables count as unset', (t) => {
  const config = loadBaseConfig({ DATABASE_URL: '', AMQP_URL: '' });
  t.is(config.LLM_API_PORT, 8080);
  t.is(config.GATEWAY_PORT, 8000);
  t.is(config.HOST, '127.0.0.1');
  t.is(config.DATABASE_URL, undefined);
  t.is(config.AMQP_URL, undefined);
});

/** A whole-number setting: its default, a value it accepts, and values it refuses naming the variable. */
const wholeNumberSetting = test.macro((t, variable: 'DATABASE_EMBEDDED_BUFFERS_MB' | 'DATABASE_EMBEDDED_PREPARED_STATEMENTS', byDefault: number, accepted: number, refused: string[]) => {
  t.is(loadBaseConfig({})[variable], byDefault);
  t.is(loadBaseConfig({ [variable]: String(accepted) })[variable], accepted);
  for (const bad of refused) {
    const error = t.throws(() => loadBaseConfig({ [variable]: bad }), { instanceOf: ConfigError });
    t.is(error!.variable, variable, bad);
  }
});

test("the embedded database's buffer pool: 16 MiB by default, 1–1024 accepted, anything else rejected naming the variable", wholeNumberSetting, 'DATABASE_EMBEDDED_BUFFERS_MB', 16, 64, ['0', '2048', '16MB', '1.5']);

test(
  "the embedded database's prepared statements: 128 by default, 0 turns them off, anything else outside 0–1000 rejected naming the variable",
  wholeNumberSetting,
  'DATABASE_EMBEDDED_PREPARED_STATEMENTS',
  128,
  0,
  ['-1', '1001', 'all', '2.5'],
);

test('the HTTP version of provider connections: 1.1 by default, 2 and auto accepted, anything else rejected naming the variable', (t) => {
  t.is(loadCatalogConfig({}).LLM_UPSTREAM_HTTP_VERSION, '1.1');
  for (const version of ['1.1', '2', 'auto'] as const) t.is(loadCatalogConfig({ LLM_UPSTREAM_HTTP_VERSION: version }).LLM_UPSTREAM_HTTP_VERSION, version);
  for (const bad of ['3', 'h2', 'HTTP/2', 'AUTO']) {
    const error = t.throws(() => loadCatalogConfig({ LLM_UPSTREAM_HTTP_VERSION: bad }), { instanceOf: ConfigError });
    t.is(error!.variable, 'LLM_UPSTREAM_HTTP_VERSION', bad);
  }
});

test('a service process with a malformed setting stops at once with one clear line', async (t) => {
  const child = startChild(process.execPath, entryArgs('services/media-api/main.ts'), {
    env: cleanEnv({ MEDIA_API_PORT: 'not-a-port', GATEWAY_SHARED_SECRET: 'x'.repeat(40) }),
  });
  const { code } = await child.exited;
  t.is(code, 1);
  const lines = child.stderr().trim().split('\n');
  t.is(lines.length, 1, child.stderr());
  t.regex(lines[0]!, /^invalid configuration: MEDIA_API_PORT: /);
});

test('a service started alone refuses to start without GATEWAY_SHARED_SECRET', async (t) => {
  const child = startChild(process.execPath, entryArgs('services/mcp-tools/main.ts'), { env: cleanEnv() });
  const { code } = await child.exited;
  t.is(code, 1);
  t.regex(child.stderr().trim(), /^invalid configuration: GATEWAY_SHARED_SECRET: required when a service runs on its own/);
});
