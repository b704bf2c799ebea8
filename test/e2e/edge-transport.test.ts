import test from 'ava';
import { randomBase62 } from '../../services/kit/secrets.js';
import { keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// Which transport the embedded edge uses to reach a co-located service: in process by default
// (llm-api's own HTTP server never sees the request), loopback HTTP when EDGE_IN_PROCESS_DISPATCH=false.
// The edge suites run under both (test/e2e/*.http.test.ts) to show the semantics are the same.
const ADMIN_KEY = `sk_${randomBase62(32)}`;

/** Requests llm-api's own HTTP server receives while `run` runs. */
async function requestsOnLlmApiServer(p: TestPlatform, run: () => Promise<void>): Promise<number> {
  const llm = p.platform.started.find((s) => s.name === 'llm-api')!;
  let requests = 0;
  const count = () => void requests++;
  llm.server.server.on('request', count);
  try {
    await run();
  } finally {
    llm.server.server.off('request', count);
  }
  return requests;
}

/** `GET /v1/models` with the official SDK (extra request headers per call). */
async function listModels(p: TestPlatform, headers: Record<string, string> = {}) {
  const { data: page, response } = await keyClient(p, ADMIN_KEY).models.list({ headers }).withResponse();
  return { status: response.status, requestId: response.headers.get('x-request-id'), cors: response.headers.get('access-control-allow-origin'), body: page };
}

for (const transport of ['in-process', 'http'] as const) {
  test(`${transport}: requests reach llm-api ${transport === 'http' ? 'over loopback HTTP' : 'without a loopback HTTP request'}, with the edge's headers`, async (t) => {
    const p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_IN_PROCESS_DISPATCH: transport === 'http' ? 'false' : 'true' } });
    try {
      // The first request validates the key (the key plugin asks llm-api over HTTP, as on Kong); later ones hit its cache.
      t.is((await listModels(p)).status, 200);
      let answer: Awaited<ReturnType<typeof listModels>> | undefined;
      const overHttp = await requestsOnLlmApiServer(p, async () => {
        answer = await listModels(p, { 'x-request-id': 'transport-check-1', origin: 'https://app.example' });
      });
      t.is(answer!.status, 200);
      t.is(answer!.body.object, 'list');
      // The request id the client chose reaches the service and comes back; the edge's CORS header is on the answer.
      t.is(answer!.requestId, 'transport-check-1');
      t.truthy(answer!.cors);
      if (transport === 'http') t.true(overHttp > 0);
      else t.is(overHttp, 0);
    } finally {
      await p.stop();
    }
  });
}
