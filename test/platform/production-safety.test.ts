import test from 'ava';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { productionRefusals, productionWarnings, standaloneRefusals } from '../../services/platform/production-safety.js';

// What a production start refuses (one line each, naming the setting) and what it only warns about.
// Everything else is set so that only the check under test speaks.
const safe = {
  NODE_ENV: 'production',
  DATABASE_URL: 'postgres://app:a-real-password@db:5432/app',
  REDIS_URL: 'redis://cache:6379',
  GATEWAY_SHARED_SECRET: 's'.repeat(40),
  MASTER_KEY: 'ab'.repeat(32),
  EDGE_CORS_ORIGINS: 'https://app.example.com',
};
const production = (env: Record<string, string>) => loadBaseConfig({ ...safe, ...env });

test('a safe production configuration is neither refused nor warned about', (t) => {
  t.deepEqual(productionRefusals(production({})), []);
  t.deepEqual(productionWarnings(production({})), []);
});

test('secrets still holding the change-me placeholder are refused, named, never printed', (t) => {
  const refusals = productionRefusals(
    production({ GATEWAY_SHARED_SECRET: 'change-me-gateway-shared-secret-32-chars-min', DATABASE_URL: 'postgres://app:change-me-postgres-password@db:5432/app' }),
  );
  t.is(refusals.length, 2, refusals.join('\n'));
  t.true(refusals.some((l) => l.includes('GATEWAY_SHARED_SECRET')));
  t.true(refusals.some((l) => l.includes('DATABASE_URL')));
  t.false(refusals.some((l) => l.includes('change-me-') || l.includes('postgres://')), refusals.join('\n'));
  // Outside production the placeholder is a laptop's business.
  t.deepEqual(productionRefusals(loadBaseConfig({ ...safe, NODE_ENV: 'development', GATEWAY_SHARED_SECRET: 'change-me-gateway-shared-secret-32-chars-min' })), []);
});

test('TRUSTED_PROXIES trusting every address is refused', (t) => {
  for (const value of ['0.0.0.0/0', '10.0.0.0/8,::/0']) {
    const refusals = productionRefusals(production({ TRUSTED_PROXIES: value }));
    t.is(refusals.length, 1, value);
    t.true(refusals[0]!.includes('TRUSTED_PROXIES'));
  }
  t.deepEqual(productionRefusals(production({ TRUSTED_PROXIES: '10.0.0.0/8' })), []);
});

test('warnings: local rate limits forced, guests on every model, prompts logged, any CORS origin', (t) => {
  const warned = (env: Record<string, string>, setting: string) => {
    const lines = productionWarnings(production(env));
    t.is(lines.length, 1, `${JSON.stringify(env)}: ${lines.join('\n')}`);
    t.true(lines[0]?.startsWith(`warning: ${setting}`), lines[0]);
  };
  warned({ DECK_RATE_LIMIT_POLICY: 'local' }, 'DECK_RATE_LIMIT_POLICY');
  warned({ GUEST_LOGIN_ENABLED: 'true' }, 'GUEST_LOGIN_ENABLED');
  warned({ LOG_PROMPTS: 'true' }, 'LOG_PROMPTS');
  warned({ EDGE_CORS_ORIGINS: '*' }, 'EDGE_CORS_ORIGINS');
  warned({ EDGE_CORS_ORIGINS: '' }, 'EDGE_CORS_ORIGINS');
  t.deepEqual(productionWarnings(production({ GUEST_LOGIN_ENABLED: 'true', GUEST_ALLOWED_MODELS: 'small-model' })), []);
  t.deepEqual(productionWarnings(production({ DECK_RATE_LIMIT_POLICY: 'redis', LOG_PROMPTS: 'false' })), []);
});

test('a process alone is refused only the fallbacks its own settings use', (t) => {
  const bare = loadBaseConfig({ NODE_ENV: 'production', GATEWAY_SHARED_SECRET: 's'.repeat(40), DATA_DIR: '/nonexistent-data-dir' });
  const withDatabase = standaloneRefusals(bare, { database: true, rateLimits: false });
  t.true(withDatabase.some((l) => l.includes('DATABASE_URL')) && withDatabase.some((l) => l.includes('MASTER_KEY')));
  t.false(withDatabase.some((l) => l.includes('REDIS_URL')));
  const edge = standaloneRefusals(bare, { database: false, rateLimits: true });
  t.is(edge.length, 1);
  t.true(edge[0]!.includes('REDIS_URL'));
});
