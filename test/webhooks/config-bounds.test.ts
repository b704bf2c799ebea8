import test from 'ava';
import { webhooksConfigShape } from '../../domains/webhooks/index.js';
import { ConfigError, loadConfig } from '../../services/kit/index.js';

// Settings that would make an invalid date or a delay no timer or broker can wait are refused at
// start, naming the variable, rather than breaking deliveries later.
const load = (env: Record<string, string>) => loadConfig(webhooksConfigShape, env);

test('a retry step longer than 24 days, or more than 50 steps, is refused naming WEBHOOK_RETRY_SCHEDULE', (t) => {
  t.deepEqual(load({ WEBHOOK_RETRY_SCHEDULE: '5s,24d' }).WEBHOOK_RETRY_SCHEDULE, [5000, 24 * 86_400_000]);
  const long = t.throws(() => load({ WEBHOOK_RETRY_SCHEDULE: '5s,25d' }), { instanceOf: ConfigError });
  t.regex(long!.message, /WEBHOOK_RETRY_SCHEDULE.*"25d" is longer than 24d/);
  const many = t.throws(() => load({ WEBHOOK_RETRY_SCHEDULE: Array(51).fill('1s').join(',') }), { instanceOf: ConfigError });
  t.regex(many!.message, /WEBHOOK_RETRY_SCHEDULE.*at most 50 steps/);
});

test('a secret grace period over a year is refused naming WEBHOOK_SECRET_GRACE_SECONDS', (t) => {
  t.is(load({ WEBHOOK_SECRET_GRACE_SECONDS: String(365 * 86400) }).WEBHOOK_SECRET_GRACE_SECONDS, 365 * 86400);
  const error = t.throws(() => load({ WEBHOOK_SECRET_GRACE_SECONDS: '1e12' }), { instanceOf: ConfigError });
  t.regex(error!.message, /WEBHOOK_SECRET_GRACE_SECONDS/);
});

test('a busy delay whose longest park (32 x) would be over 24 days is refused naming WEBHOOK_BUSY_DELAY_MS', (t) => {
  t.is(load({ WEBHOOK_BUSY_DELAY_MS: String((24 * 86_400_000) / 32) }).WEBHOOK_BUSY_DELAY_MS, (24 * 86_400_000) / 32);
  const error = t.throws(() => load({ WEBHOOK_BUSY_DELAY_MS: String((24 * 86_400_000) / 32 + 1) }), { instanceOf: ConfigError });
  t.regex(error!.message, /WEBHOOK_BUSY_DELAY_MS/);
});
