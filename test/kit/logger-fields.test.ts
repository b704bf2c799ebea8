import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import test from 'ava';
import { accessLogger, createLogger, LineWriter, serviceLogger } from '../../services/kit/logger.js';

/** One log line names its service once: the platform's logger and each hosted service's. */
function capture() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { lines, stream };
}

const countKey = (line: string, key: string) => line.split(`"${key}":`).length - 1;

test('a service logger inside the platform writes "service" once, with the service name, to the same output', (t) => {
  const { lines, stream } = capture();
  const platform = createLogger({ level: 'info', name: 'platform' }, stream);
  const llm = serviceLogger(platform, 'llm-api');
  llm.info({ port: 1 }, 'listening');
  llm.child({ request_id: 'r1' }).info('request');
  platform.info('platform started');
  t.is(lines.length, 3);
  for (const line of lines) t.is(countKey(line, 'service'), 1, line);
  t.is(JSON.parse(lines[0]!).service, 'llm-api');
  t.is(JSON.parse(lines[1]!).request_id, 'r1');
  t.is(JSON.parse(lines[2]!).service, 'platform');
});

test('the service logger follows the parent level and keeps redaction', (t) => {
  const { lines, stream } = capture();
  const platform = createLogger({ level: 'warn', name: 'platform' }, stream);
  const llm = serviceLogger(platform, 'llm-api');
  llm.info('hidden');
  llm.warn({ req: { headers: { authorization: 'Bearer sk_secret' } } }, 'shown');
  t.is(lines.length, 1);
  t.false(lines[0]!.includes('sk_secret'));
});

test('the access logger writes to the service output with its level and binding, and the service logger still redacts', (t) => {
  const { lines, stream } = capture();
  const platform = createLogger({ level: 'info', name: 'platform' }, stream);
  const llm = serviceLogger(platform, 'llm-api');
  const access = accessLogger(llm);
  t.is(accessLogger(llm), access, 'one access logger per service logger');
  access.debug({ request_id: 'r0' }, 'request');
  access.info({ request_id: 'r1', method: 'POST', path: '/v1/chat/completions', status: 200 }, 'request');
  llm.info({ key: { api_key: 'sk_secret' } }, 'service line');
  t.is(lines.length, 2, 'below the level: not written');
  t.like(JSON.parse(lines[0]!), { service: 'llm-api', request_id: 'r1', path: '/v1/chat/completions', msg: 'request' });
  t.is(countKey(lines[0]!, 'service'), 1);
  t.false(lines[1]!.includes('sk_secret'));
});

test('an access line is byte for byte the line pino writes for the same fields (time aside), at every level', (t) => {
  const { lines, stream } = capture();
  const llm = serviceLogger(createLogger({ level: 'debug', name: 'platform' }, stream), 'llm-api');
  const entry = { request_id: 'req_1', method: 'POST', path: '/v1/chat/"q"\\é\n', route: null, status: 200, duration_ms: 1.25, aborted: false, user_id: undefined, total_tokens: 14 };
  for (const level of ['debug', 'info', 'warn', 'error'] as const) {
    llm[level](entry, 'request');
    accessLogger(llm)[level](entry, 'request');
  }
  accessLogger(llm).info({}, 'empty');
  llm.info({}, 'empty');
  t.is(lines.length, 10);
  const untimed = (line: string) => line.replace(/"time":\d+/, '"time":0');
  for (let i = 0; i < 10; i += 2) t.is(untimed(lines[i + 1]!), untimed(lines[i]!));
  t.like(JSON.parse(lines[1]!), { level: 20, service: 'llm-api', name: 'llm-api', path: '/v1/chat/"q"\\é\n', route: null, msg: 'request' });
  t.false('user_id' in JSON.parse(lines[1]!), 'an undefined field is left out, as pino does');
});

// Standard output of a process: a child logs through the kit's own destination (lines kept as a
// list, one write per turn of the event loop) and the test reads what reached the pipe.
async function childOutput(script: string): Promise<{ code: number | null; lines: Array<Record<string, any>> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, lines: out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>) };
}
const loggerUrl = new URL('../../services/kit/logger.ts', import.meta.url).href;

test('lines logged in the same turn by several service loggers reach stdout complete and in order, and process.exit writes what is pending', async (t) => {
  const { code, lines } = await childOutput(`
    import { createLogger, serviceLogger, accessLogger } from ${JSON.stringify(loggerUrl)};
    const platform = createLogger({ level: 'info', name: 'platform' });
    const llm = accessLogger(serviceLogger(platform, 'llm-api'));
    const edge = serviceLogger(platform, 'gateway');
    for (let i = 0; i < 3000; i++) (i % 2 ? llm : edge).info({ n: i, pad: 'x'.repeat(i % 97) }, 'line');
    platform.info({ n: 3000 }, 'last');
    process.exit(3);
  `);
  t.is(code, 3);
  t.is(lines.length, 3001);
  t.deepEqual(lines.map((l) => l.n), Array.from({ length: 3001 }, (_, i) => i));
  t.is(lines[1]!.service, 'llm-api');
  t.is(lines[2]!.service, 'gateway');
  t.is(lines[3000]!.msg, 'last');
});

test('lines logged across turns and left when the event loop ends are all written, in order', async (t) => {
  const { code, lines } = await childOutput(`
    import { createLogger } from ${JSON.stringify(loggerUrl)};
    const logger = createLogger({ level: 'info', name: 'platform' });
    let n = 0;
    const burst = () => { for (let i = 0; i < 50; i++) logger.info({ n: n++ }, 'line'); if (n < 500) setImmediate(burst); };
    burst();
  `);
  t.is(code, 0);
  t.deepEqual(lines.map((l) => l.n), Array.from({ length: 500 }, (_, i) => i));
});

test('the kit destination keeps the lines of a turn until the turn ends, then writes them in one piece; flush writes at once', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'lines-'));
  const file = join(dir, 'out.log');
  const handle = await open(file, 'w');
  try {
    const writer = new LineWriter(handle.fd);
    const logger = createLogger({ level: 'info', name: 'platform' }, writer);
    logger.info({ n: 1 }, 'one');
    logger.info({ n: 2 }, 'two');
    t.is(readFileSync(file, 'utf8'), '', 'nothing written inside the turn');
    await new Promise((resolve) => setImmediate(resolve));
    t.deepEqual(readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).n), [1, 2]);
    logger.info({ n: 3 }, 'three');
    logger.flush();
    t.deepEqual(readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).n), [1, 2, 3]);
  } finally {
    await handle.close();
    await rm(dir, { recursive: true, force: true });
  }
});
