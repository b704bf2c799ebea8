import test from 'ava';
import { gatewayService } from '../../services/gateway/service.js';
import { openProcessRuntime, serviceUrls, startService, type StartedService } from '../../services/kit/index.js';
import type { ProcessRuntime } from '../../services/kit/index.js';
import { testConfig } from '../helpers/env.js';
import { rawExchange } from '../helpers/raw-http.js';

// Request smuggling hazards reach the edge's server (the one the platform runs it on), which
// refuses them with 400, the error body and a request id, then closes the connection: no request
// is forwarded from an ambiguous body.
let alone: { started: StartedService<ProcessRuntime>; runtime: ProcessRuntime; port: number };

test.before(async () => {
  const config = testConfig({});
  const runtime = openProcessRuntime(config, { name: 'edge-smuggling' });
  const started = await startService(gatewayService, { runtime, gatewaySecret: config.GATEWAY_SHARED_SECRET!, urls: serviceUrls(config) });
  alone = { started, runtime, port: started.server.port };
});
test.after.always(async () => {
  if (alone) {
    await alone.started.server.close(1_000);
    await alone.started.stop();
    await alone.runtime.close();
  }
});

const raw = (request: string) => rawExchange(alone.port, request);

const head = 'POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n';
for (const [title, request] of [
  ['both Content-Length and Transfer-Encoding', `${head}content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nhost: edge\r\n\r\n`],
  ['two different Content-Length values', `${head}content-length: 5\r\ncontent-length: 40\r\n\r\nhello`],
  ['a Transfer-Encoding that does not end in chunked', `${head}transfer-encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n`],
] as const) {
  test(`a request with ${title} is refused with 400 and the error body`, async (t) => {
    const answer = await raw(request);
    t.regex(answer, /^HTTP\/1\.1 400 /);
    t.is(answer.match(/HTTP\/1\.1 /g)?.length, 1, 'one answer only: nothing smuggled behind it');
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { type: string; request_id: string } };
    t.is(body.error.type, 'invalid_request_error');
    t.regex(answer, new RegExp(`\\r\\nX-Request-ID: ${body.error.request_id}\\r\\n`, 'i'));
  });
}

test('a body with an invalid chunk size is never forwarded: at most the refusal made before it, then the connection closes', async (t) => {
  // No credential: the edge refuses (401) before it reads the body; the broken chunk then closes
  // the connection instead of being parsed as a next request.
  const answer = await raw(`${head}transfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nhost: edge\r\n\r\n`);
  t.is(answer.match(/HTTP\/1\.1 /g)?.length, 1, 'one answer only: nothing smuggled behind it');
  t.regex(answer, /^HTTP\/1\.1 (400|401) /);
});
