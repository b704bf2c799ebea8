import net from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { processAlive, startChild, waitWhileRunning, type Child } from '../helpers/process.js';

// How `npm run cluster` stops, and the bounds on its readiness probes and its cleanup. Its processes are stand-ins (fixtures/cluster-fake-children.mjs,
// loaded into the script): no PostgreSQL-backed service starts. The servers' URLs point nowhere and
// PATH holds only node (no rabbitmqctl), so the cleanup fails fast and says so.

const fake = pathToFileURL(join(process.cwd(), 'test/process/fixtures/cluster-fake-children.mjs')).href;
const nowhere = { DATABASE_URL: 'postgres://127.0.0.1:1/none', AMQP_URL: 'amqp://127.0.0.1:1', REDIS_URL: 'redis://127.0.0.1:1' };

function startCluster(t: ExecutionContext, mode: string, extra: Record<string, string> = {}): Child {
  const child = startChild(process.execPath, ['scripts/cluster.mjs'], {
    env: {
      PATH: dirname(process.execPath),
      HOME: process.env.HOME,
      ...nowhere,
      CLUSTER_VERBOSE: '1',
      NODE_OPTIONS: `--import=${fake}`,
      FAKE_CLUSTER_MODE: mode,
      ...extra,
    },
  });
  t.teardown(async () => {
    child.process.kill('SIGKILL');
    await child.exited;
    const pid = fakePid(child);
    if (pid && processAlive(pid)) process.kill(pid, 'SIGKILL');
  });
  return child;
}

const fakePid = (child: Child) => Number(/fake: listening pid=(\d+)/.exec(child.stderr())?.[1] ?? 0);
const until = (child: Child, line: string) => waitWhileRunning(child, 'the cluster script', () => child.stderr().includes(line), 30_000, line);

test('a process that ignores SIGTERM is SIGKILLed once SHUTDOWN_TIMEOUT_MS + CLUSTER_STOP_MARGIN_MS pass, and the cleanup still runs', async (t) => {
  t.timeout(60_000);
  const cluster = startCluster(t, 'ignore-term', { SHUTDOWN_TIMEOUT_MS: '100', CLUSTER_STOP_MARGIN_MS: '200' });
  await until(cluster, 'fake: listening');
  const pid = fakePid(cluster);
  cluster.process.kill('SIGTERM');
  // Read once the script is gone: 300 ms after the signal it may already be, and waiting for the
  // line while it runs would race its exit.
  const { code } = await cluster.exited;
  t.true(cluster.stderr().includes('fake: SIGTERM ignored'), cluster.stderr());
  t.is(code, 1);
  t.regex(cluster.stderr(), /cluster: processes still running after 300 ms: killing them/);
  t.false(processAlive(pid));
  // The cleanup ran after the kill (it reports what it could not reach).
  t.regex(cluster.stderr(), /cluster: (schema not dropped|cleanup)/);
});

test('a second signal while stopping SIGKILLs the processes still running at once', async (t) => {
  const cluster = startCluster(t, 'ignore-term');
  await until(cluster, 'fake: listening');
  const pid = fakePid(cluster);
  cluster.process.kill('SIGINT');
  await until(cluster, 'fake: SIGTERM ignored');
  cluster.process.kill('SIGTERM');
  const { code } = await cluster.exited;
  t.is(code, 1);
  t.regex(cluster.stderr(), /cluster: second signal: killing the processes still running/);
  t.false(processAlive(pid));
  t.regex(cluster.stderr(), /cluster: (schema not dropped|cleanup)/);
});

test('a readiness probe that succeeds as the stop begins starts nothing more', async (t) => {
  const cluster = startCluster(t, 'ready-on-term');
  await until(cluster, 'fake: probe held');
  cluster.process.kill('SIGTERM');
  const { code } = await cluster.exited;
  t.is(code, 0);
  const spawned = cluster.stderr().split('\n').filter((l) => l.startsWith('fake-children: spawn '));
  t.deepEqual(spawned, ['fake-children: spawn services/llm-api/main.ts']);
});

test('a readiness probe the process accepts and never answers is abandoned at CLUSTER_PROBE_TIMEOUT_MS and tried again', async (t) => {
  // The start's own bound (CLUSTER_READY_TIMEOUT_MS, 120 s) is far off: only the probe's bound can
  // end the first probe before `until` gives up.
  const cluster = startCluster(t, 'never-answer', { CLUSTER_PROBE_TIMEOUT_MS: '200' });
  // The first probe is held until its bound; the next one opens a new connection.
  await until(cluster, 'fake: probe connection 2');
  t.false(cluster.stderr().includes('fake-children: spawn services/response-api'));
  cluster.process.kill('SIGTERM');
  t.is((await cluster.exited).code, 0);
});

test('a start whose probe is never answered still ends at CLUSTER_READY_TIMEOUT_MS, with one line', async (t) => {
  t.timeout(60_000);
  const cluster = startCluster(t, 'never-answer', { CLUSTER_READY_TIMEOUT_MS: '500' });
  const { code } = await cluster.exited;
  t.is(code, 1);
  t.regex(cluster.stderr(), /cluster: start failed: timed out waiting for llm-api-a ready/);
  t.regex(cluster.stderr(), /fake: probe connection 1/);
});

test('a cleanup whose servers accept and never answer ends at CLUSTER_CLEANUP_TIMEOUT_MS, naming what it left, exit 1', async (t) => {
  t.timeout(60_000);
  // PostgreSQL, RabbitMQ and Redis that take the connection and never say a word.
  const held: net.Socket[] = [];
  const silent = net.createServer((socket) => void held.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of held) socket.destroy();
    silent.close();
  });
  const at = `127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  const cluster = startCluster(t, 'never-answer', {
    DATABASE_URL: `postgres://u:p@${at}/none`,
    AMQP_URL: `amqp://${at}`,
    REDIS_URL: `redis://${at}`,
    CLUSTER_CLEANUP_TIMEOUT_MS: '300',
  });
  await until(cluster, 'fake: listening');
  const prefix = /cluster: prefix (cluster_\w+):/.exec(cluster.stderr())![1]!;
  cluster.process.kill('SIGTERM');
  const { code } = await cluster.exited;
  t.is(code, 1);
  const line = cluster.stderr().split('\n').find((l) => l.startsWith('cluster: cleanup not finished'));
  t.truthy(line, cluster.stderr());
  t.true(line!.startsWith('cluster: cleanup not finished after 300 ms; left behind: '), line);
  t.true(line!.includes(`schema ${prefix}`), line);
  t.true(held.length > 0);
});
