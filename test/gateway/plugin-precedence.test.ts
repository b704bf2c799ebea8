import test from 'ava';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEdge } from '../../services/gateway/edge.js';
import { parseDeck } from '../../services/gateway/deck.js';
import { ManualClock } from '../../services/kit/clock.js';
import { createInProcessRevocations } from '../../services/kit/revocations.js';
import { silentLogger } from '../../plugins/core/index.js';
import { startFakeUpstream, startFakeValidator } from '../plugins/fakes.js';

// Kong runs ONE instance of a plugin per request, the most specific for the request's route,
// service and consumer: consumer+route+service > consumer+route > consumer+service > route+service
// > consumer > route > service > global. The consumer is known once an auth plugin set it, and the
// instance of every later plugin is picked then. The only consumer our auth plugins set is the
// anonymous one (a request without a valid credential); a verified key has none. Each instance of
// identity-headers here passes its own gateway token on, so the service tells which one ran; the
// anonymous consumer's own instances let it through (`refuse_anonymous: false`), the others refuse it.
const GATEWAY = 'gw-'.padEnd(40, 'p');
const LET_IN = (token: string) => `{ name: identity-headers, config: { gateway_token: ${token}, refuse_anonymous: false } }`;
const REFUSE = (token: string) => `{ name: identity-headers, config: { gateway_token: ${token} } }`;
const LIMIT = (perMinute: number) => `{ name: tiered-rate-limit, config: { ip_per_minute: ${perMinute}, policy: local } }`;

async function start() {
  const upstream = await startFakeUpstream();
  const validator = await startFakeValidator(GATEWAY);
  const auth = `{ name: api-key-auth, config: { validate_url: '${validator.url}', gateway_token: ${GATEWAY}, anonymous: anonymous } }`;
  const deck = parseDeck(
    `
_format_version: "3.0"
services:
  - name: s
    url: ${upstream.url}
    routes:
      - { name: plain, paths: ['~/plain(/|$)'], plugins: [${auth}] }
      - name: routed
        paths: ['~/routed(/|$)']
        plugins:
          - ${auth}
          - ${REFUSE('route-token')}
          - { name: identity-headers, consumer: anonymous, config: { gateway_token: consumer-route-token, refuse_anonymous: false } }
      - { name: pinned, paths: ['~/pinned(/|$)'], plugins: [${auth}] }
      - name: limited
        paths: ['~/limited(/|$)']
        plugins:
          - ${auth}
          - ${LIMIT(50)}
          - { name: tiered-rate-limit, consumer: anonymous, config: { ip_per_minute: 2, policy: local } }
consumers:
  - username: anonymous
    plugins:
      - ${LET_IN('consumer-token')}
plugins:
  - ${REFUSE('global-token')}
  - { name: identity-headers, route: pinned, service: s, config: { gateway_token: route-service-token } }
`,
    {},
  );
  const edge = await createEdge({
    deck,
    deps: { clock: new ManualClock(Date.UTC(2026, 11, 7, 12, 0, 1)), logger: silentLogger, revocations: createInProcessRevocations() },
    trustedProxies: ['127.0.0.1'],
    connectTimeoutMs: 1000,
    readTimeoutMs: 5000,
  });
  const server = createServer((req, res) => edge.handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    key: validator.add('user_precedence', 'free').key,
    async send(path: string, headers: Record<string, string> = {}) {
      const res = await fetch(`${url}${path}`, { headers });
      const body = (await res.json()) as { headers?: Record<string, string>; error?: { code: string } };
      return { status: res.status, headers: res.headers, gatewayToken: body.headers?.['x-gateway-token'], error: body.error };
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await edge.close();
      await Promise.all([upstream.close(), validator.close()]);
    },
  };
}

let edge: Awaited<ReturnType<typeof start>>;
test.before(async () => {
  edge = await start();
});
test.after.always(async () => {
  await edge?.close();
});

test('global and consumer scope: the anonymous consumer runs only its own instance, a verified key only the global one', async (t) => {
  const anonymous = await edge.send('/plain');
  t.is(anonymous.status, 200, 'the global instance (which refuses the anonymous consumer) does not run beside the consumer one');
  t.is(anonymous.gatewayToken, 'consumer-token');
  const keyed = await edge.send('/plain', { 'x-api-key': edge.key });
  t.is(keyed.status, 200);
  t.is(keyed.gatewayToken, 'global-token');
});

test('route and consumer+route scope: on that route the anonymous consumer runs only the consumer+route instance (over its consumer-only one), a verified key only the route one', async (t) => {
  const anonymous = await edge.send('/routed');
  t.is(anonymous.status, 200, 'the route instance (which refuses the anonymous consumer) does not run beside it');
  t.is(anonymous.gatewayToken, 'consumer-route-token');
  const keyed = await edge.send('/routed', { 'x-api-key': edge.key });
  t.is(keyed.status, 200);
  t.is(keyed.gatewayToken, 'route-token');
});

test('route+service scope beats consumer scope: on that route the anonymous consumer gets the route+service instance only', async (t) => {
  const anonymous = await edge.send('/pinned');
  t.is(anonymous.status, 401, "the route+service instance refuses the anonymous consumer; the consumer's instance, which would let it in, does not run");
  t.is(anonymous.error?.code, 'unauthorized');
  const keyed = await edge.send('/pinned', { 'x-api-key': edge.key });
  t.is(keyed.gatewayToken, 'route-service-token');
});

test("tiered-rate-limit at route and consumer+route scope: the anonymous consumer's requests count on its own instance only, not on the route's", async (t) => {
  const from = { 'x-forwarded-for': '203.0.113.77' };
  const first = await edge.send('/limited', from);
  t.is(first.status, 200);
  t.is(first.headers.get('x-ratelimit-limit-minute'), '2');
  t.is(first.headers.get('x-ratelimit-remaining-minute'), '1');
  t.is((await edge.send('/limited', from)).status, 200);
  t.is((await edge.send('/limited', from)).status, 429, "the consumer+route instance's limit of 2");
  const keyed = await edge.send('/limited', { ...from, 'x-api-key': edge.key });
  t.is(keyed.status, 200);
  t.is(keyed.headers.get('x-ratelimit-limit-minute'), '50');
  t.is(keyed.headers.get('x-ratelimit-remaining-minute'), '49', "the anonymous requests never reached the route instance's count");
});
