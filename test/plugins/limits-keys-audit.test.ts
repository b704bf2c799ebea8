import test from 'ava';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import type { ValidationResult } from '../../plugins/api-key-auth/validator.js';
import type { Decision, EdgeRequest } from '../../plugins/core/types.js';
import { ManualClock } from '../../services/kit/clock.js';
import { randomBase62, sha256Hex } from '../../services/kit/secrets.js';
import { listenOn } from './fakes.js';

const request = (headers: Record<string, string>): EdgeRequest => ({ method: 'POST', path: '/v1/chat/completions', headers, clientIp: '127.0.0.1', shared: {} });
const status = (decision: Decision) => (decision.kind === 'respond' ? decision.status : 200);

test('a request arriving after a revocation never joins a validation started before it', async (t) => {
  const key = `sk_${randomBase62(32)}`;
  const answers: Array<(result: ValidationResult) => void> = [];
  const config = parseApiKeyAuthConfig({ validate_url: 'http://127.0.0.1:9/unused', cache_ttl_seconds: 3600 });
  const core = createApiKeyAuth(config, {
    clock: new ManualClock(1_800_000_000_000),
    validate: () => new Promise<ValidationResult>((resolve) => answers.push(resolve)),
  });
  const before = core.access(request({ 'x-api-key': key }));
  t.is(answers.length, 1);
  core.cache.revoke(sha256Hex(key)); // the key is revoked while its first check is in flight
  const after = core.access(request({ 'x-api-key': key }));
  t.is(answers.length, 2, 'the request after the revocation asks the validator again');
  answers[0]!({ kind: 'valid', key: { user_id: 'user_revoked' } }); // read before the revocation
  answers[1]!({ kind: 'invalid' });
  t.is(status(await before), 200);
  t.is(status(await after), 401);
  t.is(core.cache.size, 0);
  await core.close();
});

test('a malformed validator answer that echoes the key leaves nothing of the key in the log', async (t) => {
  const key = `sk_${randomBase62(32)}`;
  const validator = await listenOn((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', () => void res.writeHead(200, { 'content-type': 'application/json' }).end(`{"user_id":"u1","echo":${raw}`)); // cut short
  });
  t.teardown(() => validator.close());
  const logged: string[] = [];
  const log = (fields: Record<string, unknown>, message: string) => void logged.push(`${message} ${JSON.stringify(fields)}`);
  const core = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: `${validator.url}/internal/auth/validate-api-key` }), { logger: { warn: log, error: log } });
  t.teardown(() => core.close());
  const decision = await core.access(request({ 'x-api-key': key }));
  t.is(status(decision), 503);
  t.is(logged.length, 1);
  t.true(logged[0]!.includes('malformed validator answer'));
  t.false(logged.join('\n').includes(key.slice(3)));
});
