import test from 'ava';
import { Plugin as IdentityHeadersPlugin } from '../../plugins/identity-headers/kong.js';
import { withoutKongKeys, type KongPdk } from '../../plugins/core/index.js';

// A referenceable field (`gateway_token`, `redis_url`) may hold a vault reference in decK
// (`{vault://env/gateway-secret}`). Kong resolves it when it reads the plugin entity and records the
// reference beside the resolved values: its schema code (`process_auto_fields`, kong/db/schema/
// init.lua) sets `config["$refs"] = { gateway_token = "{vault://…}" }`, and the plugins iterator sends
// that table to the plugin server as part of the configuration. It is Kong's bookkeeping, not a field
// of ours: an instance configured with a vault reference must run, not answer 500 as misconfigured.

function fakeKong(headers: Record<string, string[]>) {
  const upstream: Record<string, string[]> = { ...headers };
  const state: { exit: null | { status: number; body: unknown } } = { exit: null };
  const kong: KongPdk = {
    request: {
      getHeaders: async () => ({ ...upstream }),
      getHeader: async (name) => upstream[name]?.[0],
      getMethod: async () => 'GET',
      getPath: async () => '/v1/models',
    },
    client: { getForwardedIp: async () => '192.0.2.1', loadConsumer: async () => undefined, authenticate: async () => undefined },
    ctx: { shared: { get: async () => undefined, set: async () => undefined } },
    service: {
      request: {
        setHeaders: async (set) => void Object.entries(set).forEach(([k, v]) => (upstream[k.toLowerCase()] = [v])),
        clearHeader: async (name) => void delete upstream[name.toLowerCase()],
      },
    },
    response: { setHeaders: async () => undefined, exit: async (status, body) => void (state.exit = { status, body }) },
    log: { warn: async () => undefined, err: async () => undefined },
  };
  return { kong, state, upstream };
}

test('a configuration whose secret is a vault reference runs on Kong (its "$refs" is set aside)', async (t) => {
  // What Kong sends for `gateway_token: "{vault://env/gw-secret}"` once resolved (plus its own keys).
  const plugin = new IdentityHeadersPlugin({
    gateway_token: 'resolved-secret',
    $refs: { gateway_token: '{vault://env/gw-secret}' },
    __key__: 'plugins:identity-headers::::ws',
    __seq__: 7,
    __plugin_id: '00000000-0000-4000-8000-000000000007',
  });
  const { kong, state, upstream } = fakeKong({ 'x-user-id': ['admin'] });
  await plugin.access(kong);
  t.is(state.exit, null, 'proxied, not the 500 of a misconfigured instance');
  t.deepEqual(upstream['x-gateway-token'], ['resolved-secret']);
  t.false('x-user-id' in upstream);
});

test('withoutKongKeys sets "$refs" aside with Kong’s other keys, and keeps every field of ours', (t) => {
  t.deepEqual(withoutKongKeys({ gateway_token: 'x', $refs: { gateway_token: '{vault://env/x}' }, route_id: 'r', __seq__: 1 }), { gateway_token: 'x' });
  // Any other unknown key still reaches the schema, which refuses it.
  t.deepEqual(withoutKongKeys({ gateway_tokn: 'typo', $other: 1 }), { gateway_tokn: 'typo', $other: 1 });
});
