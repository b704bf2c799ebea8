import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { KONG_SPOOF } from '../plugins/fakes.js';
import { startEdgeWithFakes } from './edge-harness.js';

// Kong's bundled auth plugins tell the service who the consumer is with X-Consumer-*,
// X-Credential-Identifier, X-Anonymous-Consumer and X-Authenticated-* headers. Kong itself neither
// sets nor removes them for our plugins, so identity-headers strips a client's (its
// `strip_kong_consumer_headers`, set in deck/kong.yaml): the embedded edge, running the same
// deck, forwards none of them either.
const clock = new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10));
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({ clock });
});
test.after.always(async () => {
  await edge?.close();
});

test("Kong's identity headers a client sends reach no service, with a credential and on a public route", async (t) => {
  const key = edge.validator.add('user_kong_headers', 'pro');
  for (const [path, init] of [
    ['/v1/models', { headers: { ...KONG_SPOOF, 'x-api-key': key.key } }],
    ['/llm/auth/guest-login', { method: 'POST', headers: KONG_SPOOF }],
  ] as const) {
    const res = await fetch(`${edge.url}${path}`, init);
    t.is(res.status, 200, path);
    const echo = (await res.json()) as { headers: Record<string, string> };
    for (const name of Object.keys(KONG_SPOOF)) t.false(name.toLowerCase() in echo.headers, `${path}: ${name}`);
  }
});
