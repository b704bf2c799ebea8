import test from 'ava';
import { cleanEnv, startChild } from '../helpers/process.js';

// `npm run cluster` refuses a bad CLUSTER_READY_TIMEOUT_MS, CLUSTER_CLEANUP_TIMEOUT_MS,
// CLUSTER_PROBE_TIMEOUT_MS or CLUSTER_STOP_MARGIN_MS with one line, before it starts anything: read
// as NaN it would make the wait it bounds endless.

const servers = { DATABASE_URL: 'postgres://127.0.0.1:1/none', AMQP_URL: 'amqp://127.0.0.1:1', REDIS_URL: 'redis://127.0.0.1:1' };

for (const [name, value] of [
  ...['soon', '-5', '0', '1.5', '99999999999'].map((v) => ['CLUSTER_READY_TIMEOUT_MS', v] as const),
  ...['later', '0', '2147483648'].map((v) => ['CLUSTER_CLEANUP_TIMEOUT_MS', v] as const),
  ...['quick', '0', '2.5'].map((v) => ['CLUSTER_PROBE_TIMEOUT_MS', v] as const),
  ...['never', '0', '-1', '2147483648'].map((v) => ['CLUSTER_STOP_MARGIN_MS', v] as const),
]) {
  test(`${name}=${value} stops the script with one line naming it`, async (t) => {
    const child = startChild(process.execPath, ['scripts/cluster.mjs'], { env: cleanEnv({ ...servers, [name]: value }) });
    t.teardown(() => child.process.kill('SIGKILL'));
    const { code } = await child.exited;
    t.is(code, 1);
    const lines = child.stderr().trim().split('\n');
    t.is(lines.length, 1);
    t.regex(lines[0]!, new RegExp(`^cluster: ${name} must be a whole number of milliseconds`));
    t.true(lines[0]!.includes(`"${value}"`));
    t.false(child.stderr().includes('starting llm-api'));
  });
}
