import { Writable } from 'node:stream';
import test from 'ava';
import { accessLogger, createLogger, serviceLogger } from '../../services/kit/logger.js';

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
