import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from './edge-harness.js';

// A request the edge fails on after routing, in its own code rather than in a plugin (a plugin that
// throws is answered by the plugin runner): the catch-all answer still carries the request id, in
// the error body and the X-Request-ID header, and the failure is logged once with that id.
// The failure is a real misconfiguration: a gateway secret with a character no header value can
// hold, which identity-headers sets on every proxied request and Node refuses to send upstream.

type Logged = { fields: Record<string, unknown>; message: string };
const errors: Logged[] = [];
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({
    clock: new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10)),
    vars: { DECK_GATEWAY_SHARED_SECRET: 'gw-\u20ac'.padEnd(40, 'z') },
    logger: { warn() {}, error: (fields, message) => errors.push({ fields, message }) },
  });
});
test.after.always(async () => {
  await edge?.close();
});

type ErrorBody = { error: { type: string; code: string; message: string; param: string | null; request_id?: string } };

test.serial('the catch-all 500 carries the request id the client sent, and the failure is logged once with it', async (t) => {
  errors.length = 0;
  const res = await fetch(`${edge.url}/.well-known/jwks.json`, { headers: { 'x-request-id': 'req-catch-all-1' } });
  t.is(res.status, 500);
  t.is(res.headers.get('x-request-id'), 'req-catch-all-1');
  const body = (await res.json()) as ErrorBody;
  t.deepEqual(body, {
    error: { type: 'internal_error', code: 'server_error', message: 'The gateway could not process the request', param: null, request_id: 'req-catch-all-1' },
  });
  t.is(edge.upstream.seen.length, 0, 'nothing reached the upstream');
  const lines = errors.filter((e) => e.fields.request_id === 'req-catch-all-1');
  t.is(lines.length, 1);
  t.is(errors.length, 1);
  t.is(lines[0]!.message, 'gateway: request failed');
  t.is(typeof lines[0]!.fields.err, 'string');
  t.false('stack' in lines[0]!.fields);
});

test.serial('without a usable client id the catch-all 500 carries the fresh id the edge gave the request', async (t) => {
  errors.length = 0;
  const res = await fetch(`${edge.url}/.well-known/jwks.json`, { headers: { 'x-request-id': 'not a safe id\t<>' } });
  t.is(res.status, 500);
  const id = res.headers.get('x-request-id');
  t.truthy(id);
  t.not(id, 'not a safe id\t<>');
  const body = (await res.json()) as ErrorBody;
  t.is(body.error.request_id, id!);
  t.deepEqual(
    errors.map((e) => e.fields.request_id),
    [id],
  );
});
