import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { checkRedisAnswers } from '../../services/gateway/deps.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { startupFailureLine } from '../../services/platform/startup-errors.js';
import { startFaultProxyFor } from '../helpers/fault-proxy.js';
import { startPrivateRedis } from '../helpers/private-servers.js';
import { cleanEnv, entryArgs, freePort, startChild, startEntryPoint } from '../helpers/process.js';
import { TEST_AMQP_URL, TEST_REDIS_URL } from '../helpers/servers.js';

/**
 * A start that cannot reach a server it is configured with, or whose Keycloak settings are only
 * partly set, stops with one line on stderr naming the setting (never a secret) and exit code 1.
 * Real child processes run the platform's entry point (`npm start`) and the edge alone; an
 * unreachable server is a loopback port drawn by `freePort()` that nobody listens on, a stalled one
 * a fault proxy in front of the real Redis or a TCP server that accepts and never says anything.
 * Refused credentials are a password the real Redis (which has none) or a private one refuses.
 */

/** stderr without Node's own warnings (e.g. experimental loader notices). */
const ownLines = (stderr: string) => stderr.split('\n').filter((l) => l.trim() && !/Warning|--trace-warnings/.test(l));

/** A TCP server that accepts connections and never says anything (a stalled server); closed when the test ends. */
async function silentServer(t: ExecutionContext) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {}).on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  return { server, port: (server.address() as net.AddressInfo).port };
}

/** `npm start`'s entry point in a child process, on free ports and its own DATA_DIR, with `env`; killed when the test ends. */
async function spawnPlatform(t: ExecutionContext, env: Record<string, string>) {
  const dataDir = mkdtempSync(join(tmpdir(), 'startup-servers-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const ports: Record<string, string> = {};
  for (const name of ['GATEWAY_PORT', 'LLM_API_PORT', 'RESPONSE_API_PORT', 'MEDIA_API_PORT', 'MCP_TOOLS_PORT']) ports[name] = String(await freePort());
  const child = startChild(process.execPath, entryArgs('services/platform/main.ts'), { env: cleanEnv({ LOG_LEVEL: 'silent', DATA_DIR: dataDir, ...ports, ...env }) });
  t.teardown(() => child.process.kill('SIGKILL'));
  return child;
}

async function startPlatformWith(t: ExecutionContext, env: Record<string, string>) {
  const child = await spawnPlatform(t, env);
  const { code } = await child.exited;
  return { code, lines: ownLines(child.stderr()), stderr: child.stderr(), stdout: child.stdout() };
}

test('npm start with REDIS_URL on a closed port: one line naming REDIS_URL and the refused connection, not a deck error, password redacted', async (t) => {
  t.timeout(180_000);
  const closed = await freePort();
  const { code, lines, stderr, stdout } = await startPlatformWith(t, { REDIS_URL: `redis://:s3cret-redis@127.0.0.1:${closed}` });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to 127.0.0.1:${closed} (REDIS_URL=redis://:***@127.0.0.1:${closed}): connection refused (ECONNREFUSED); check that the server runs and that REDIS_URL points at it`]);
  t.false(stderr.includes('s3cret') || stdout.includes('s3cret'));
  t.false(stdout.includes('platform ready'), 'it never served');
});

test('npm start with AMQP_URL on a closed port: one line naming AMQP_URL, password redacted', async (t) => {
  t.timeout(180_000);
  const closed = await freePort();
  const { code, lines, stderr } = await startPlatformWith(t, { AMQP_URL: `amqp://app:s3cret-mq@127.0.0.1:${closed}` });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to 127.0.0.1:${closed} (AMQP_URL=amqp://app:***@127.0.0.1:${closed}): connection refused (ECONNREFUSED); check that the server runs and that AMQP_URL points at it`]);
  t.false(stderr.includes('s3cret'));
});

test('npm start with DATABASE_URL on a closed port: one line naming DATABASE_URL, password redacted', async (t) => {
  t.timeout(180_000);
  const closed = await freePort();
  const { code, lines, stderr } = await startPlatformWith(t, { DATABASE_URL: `postgres://app:s3cret-db@127.0.0.1:${closed}/app` });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to 127.0.0.1:${closed} (DATABASE_URL=postgres://app:***@127.0.0.1:${closed}/app): connection refused (ECONNREFUSED); check that the server runs and that DATABASE_URL points at it`]);
  t.false(stderr.includes('s3cret'));
});

test('npm start with part of the Keycloak settings: one line naming the missing ones, before anything opens, no secret', async (t) => {
  t.timeout(180_000);
  const { code, lines, stderr } = await startPlatformWith(t, { KEYCLOAK_REALM: 'platform', KEYCLOAK_CLIENT_SECRET: 's3cret-kc' });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [
    'invalid configuration: KEYCLOAK_URL: not set, but KEYCLOAK_REALM, KEYCLOAK_CLIENT_SECRET are: the Keycloak identity provider needs KEYCLOAK_URL, KEYCLOAK_REALM, KEYCLOAK_CLIENT_ID, KEYCLOAK_CLIENT_SECRET all set, or none of them (missing: KEYCLOAK_URL, KEYCLOAK_CLIENT_ID)',
  ]);
  t.false(stderr.includes('s3cret'));
});

test('the edge alone with REDIS_URL at a Redis that accepts and never answers: one line naming REDIS_URL and the timeout', async (t) => {
  t.timeout(180_000);
  const proxy = await startFaultProxyFor(TEST_REDIS_URL, 6379);
  t.teardown(() => proxy.close());
  proxy.stall();
  const child = startEntryPoint(
    'services/gateway/main.ts',
    cleanEnv({ LOG_LEVEL: 'silent', GATEWAY_PORT: String(await freePort()), GATEWAY_SHARED_SECRET: 'x'.repeat(40), REDIS_URL: `redis://:s3cret@127.0.0.1:${proxy.port}` }),
  );
  t.teardown(() => child.process.kill('SIGKILL'));
  const { code } = await child.exited;
  t.is(code, 1, child.stderr());
  t.deepEqual(ownLines(child.stderr()), [
    `cannot connect to 127.0.0.1:${proxy.port} (REDIS_URL=redis://:***@127.0.0.1:${proxy.port}): timed out (ETIMEDOUT); check that the server runs and that REDIS_URL points at it`,
  ]);
  t.true(proxy.connections() >= 1, 'the connection was made, and then nothing answered');
});

test('checkRedisAnswers: the real Redis passes; refused, stalled and cut each throw what startupFailureLine names', async (t) => {
  await t.notThrowsAsync(checkRedisAnswers(TEST_REDIS_URL, 5000));
  const lineFor = async (url: string) => {
    const error = await t.throwsAsync(checkRedisAnswers(url, 300));
    return startupFailureLine(error, loadBaseConfig({ REDIS_URL: url }));
  };
  const closed = await freePort();
  t.regex(String(await lineFor(`redis://127.0.0.1:${closed}`)), /\(REDIS_URL=redis:\/\/127\.0\.0\.1:\d+\): connection refused \(ECONNREFUSED\)/);
  const proxy = await startFaultProxyFor(TEST_REDIS_URL, 6379);
  t.teardown(() => proxy.close());
  proxy.stall();
  t.regex(String(await lineFor(`redis://127.0.0.1:${proxy.port}`)), /\(REDIS_URL=redis:\/\/127\.0\.0\.1:\d+\): timed out \(ETIMEDOUT\)/);
  proxy.cut();
  // Closed at once by the other end: reset, or closed under the client's first write (EPIPE).
  t.regex(String(await lineFor(`redis://127.0.0.1:${proxy.port}`)), /\(REDIS_URL=redis:\/\/127\.0\.0\.1:\d+\): connection (reset \(ECONNRESET\)|closed by the server \(EPIPE\))/);
});

test('npm start with REDIS_URL at a Redis that accepts and never answers: one line naming REDIS_URL and the timeout, exit 1 (the cleanup never waits on the stalled subscription)', async (t) => {
  t.timeout(180_000);
  const proxy = await startFaultProxyFor(TEST_REDIS_URL, 6379);
  t.teardown(() => proxy.close());
  proxy.stall();
  const { code, lines, stderr, stdout } = await startPlatformWith(t, { REDIS_URL: `redis://:s3cret-redis@127.0.0.1:${proxy.port}` });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [
    `cannot connect to 127.0.0.1:${proxy.port} (REDIS_URL=redis://:***@127.0.0.1:${proxy.port}): timed out (ETIMEDOUT); check that the server runs and that REDIS_URL points at it`,
  ]);
  t.false(stderr.includes('s3cret') || stdout.includes('s3cret'));
});

test('npm start with AMQP_URL at a server that accepts and never answers the AMQP handshake: one line naming AMQP_URL and the timeout, password redacted', async (t) => {
  t.timeout(180_000);
  const { port } = await silentServer(t);
  const { code, lines, stderr } = await startPlatformWith(t, { AMQP_URL: `amqp://app:s3cret-mq@127.0.0.1:${port}` });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to 127.0.0.1:${port} (AMQP_URL=amqp://app:***@127.0.0.1:${port}): timed out (ETIMEDOUT); check that the server runs and that AMQP_URL points at it`]);
  t.false(stderr.includes('s3cret'));
});

test('npm start with REDIS_URL carrying a password the server refuses: one line naming REDIS_URL and the refused authentication, password redacted', async (t) => {
  t.timeout(180_000);
  // The shared Redis has no password: an AUTH with one is answered with an error, as a wrong one would be.
  const url = new URL(TEST_REDIS_URL);
  url.password = 's3cret-wrong';
  const port = Number(url.port || 6379);
  const { code, lines, stderr, stdout } = await startPlatformWith(t, { REDIS_URL: url.toString() });
  t.is(code, 1, stderr);
  t.is(lines.length, 1, stderr);
  t.regex(lines[0]!, new RegExp(`^cannot connect to ${url.hostname}:${port} \\(REDIS_URL=redis://${url.username}:\\*\\*\\*@${url.host}\\): authentication refused \\((ERR|WRONGPASS)\\); check the user name and password in REDIS_URL$`));
  t.false(stderr.includes('s3cret') || stdout.includes('s3cret'));
});

test('npm start with AMQP_URL carrying a password RabbitMQ refuses: one line naming AMQP_URL and the refused authentication, password redacted', async (t) => {
  t.timeout(180_000);
  // The shared RabbitMQ knows guest/guest: the same user with another password is refused (403 ACCESS_REFUSED).
  const url = new URL(TEST_AMQP_URL);
  url.password = 's3cret-wrong';
  const port = Number(url.port || 5672);
  const { code, lines, stderr, stdout } = await startPlatformWith(t, { AMQP_URL: url.toString() });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to ${url.hostname}:${port} (AMQP_URL=amqp://${url.username}:***@${url.host}): authentication refused (ACCESS_REFUSED); check the user name and password in AMQP_URL`]);
  t.false(stderr.includes('s3cret') || stdout.includes('s3cret'));
  t.false(stdout.includes('platform ready'), 'it never served');
});

test('npm start with DATABASE_URL at a server that accepts and never answers: one line naming DATABASE_URL and DATABASE_CONNECT_TIMEOUT_MS, password redacted', async (t) => {
  t.timeout(180_000);
  const { port } = await silentServer(t);
  const { code, lines, stderr } = await startPlatformWith(t, { DATABASE_URL: `postgres://app:s3cret-db@127.0.0.1:${port}/app`, DATABASE_CONNECT_TIMEOUT_MS: '1500' });
  t.is(code, 1, stderr);
  t.deepEqual(lines, [`cannot connect to 127.0.0.1:${port} (DATABASE_URL=postgres://app:***@127.0.0.1:${port}/app): timed out (no connection within DATABASE_CONNECT_TIMEOUT_MS, 1500 ms); check that the server runs and that DATABASE_URL points at it`]);
  t.false(stderr.includes('s3cret'));
});

test('npm start: a SIGTERM while the start waits on a server that never answers ends the process with exit 1 and one line', async (t) => {
  t.timeout(180_000);
  const { server } = await silentServer(t);
  const port = (server.address() as net.AddressInfo).port;
  const connected = once(server, 'connection');
  // Without the signal this start would go on waiting for PostgreSQL (until the pool gives up) and
  // end with the DATABASE_URL line instead.
  const child = await spawnPlatform(t, { DATABASE_URL: `postgres://app:s3cret-db@127.0.0.1:${port}/app`, DATABASE_CONNECT_TIMEOUT_MS: '600000', SHUTDOWN_TIMEOUT_MS: '200' });
  const first = await Promise.race([connected.then(() => 'connected'), child.exited.then(() => 'exited')]);
  t.is(first, 'connected', child.stderr());
  child.process.kill('SIGTERM');
  const { code } = await child.exited;
  t.is(code, 1, child.stderr());
  t.deepEqual(ownLines(child.stderr()), ['stopped by SIGTERM while starting: the start did not finish within SHUTDOWN_TIMEOUT_MS (200 ms)']);
  t.false(child.stderr().includes('s3cret'));
});

test('checkRedisAnswers: a password the server refuses throws what startupFailureLine names as refused authentication, never the password', async (t) => {
  const url = new URL(TEST_REDIS_URL);
  url.password = 's3cret-wrong';
  const error = await t.throwsAsync(checkRedisAnswers(url.toString(), 5000));
  t.false(error!.message.includes('s3cret'));
  const line = startupFailureLine(error, loadBaseConfig({ REDIS_URL: url.toString() }));
  t.regex(String(line), /\(REDIS_URL=redis:\/\/:\*\*\*@[^)]+\): authentication refused \((ERR|WRONGPASS)\); check the user name and password in REDIS_URL$/);
  t.false(String(line).includes('s3cret'));
  // Without a password the same server answers.
  await t.notThrowsAsync(checkRedisAnswers(TEST_REDIS_URL, 5000));
});

test('checkRedisAnswers against a Redis with a password: the right one passes; a wrong one (WRONGPASS) and none (NOAUTH) are refused authentication', async (t) => {
  t.timeout(120_000);
  const redis = await startPrivateRedis();
  t.teardown(() => redis.dispose());
  const { Redis } = await import('ioredis');
  const admin = new Redis(redis.url);
  await admin.config('SET', 'requirepass', 'right-pw');
  admin.disconnect();
  const withPassword = (password: string) => {
    const url = new URL(redis.url);
    url.password = password;
    return url.toString();
  };
  await t.notThrowsAsync(checkRedisAnswers(withPassword('right-pw'), 5000));
  const lineFor = async (url: string) => startupFailureLine(await t.throwsAsync(checkRedisAnswers(url, 5000)), loadBaseConfig({ REDIS_URL: url }));
  t.regex(String(await lineFor(withPassword('s3cret-wrong'))), /\(REDIS_URL=redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\): authentication refused \(WRONGPASS\); check the user name and password in REDIS_URL$/);
  t.regex(String(await lineFor(redis.url)), /\(REDIS_URL=redis:\/\/127\.0\.0\.1:\d+\): authentication refused \(NOAUTH\); check the user name and password in REDIS_URL$/);
});
