import test from 'ava';
import { kongPluginClass } from '../../plugins/core/kong-plugin.js';
import type { KongPdk } from '../../plugins/core/kong-host.js';
import { CONTINUE, type PluginCore } from '../../plugins/core/types.js';
import { waitFor } from '../helpers/wait.js';

// Kong starts a new instance at every configuration change and never tells the plugin server the
// old one is gone. Our cores hold Redis connections and connection pools (api-key-auth,
// tiered-rate-limit): the core of a configuration no plugin entity uses any more must be closed,
// and an instance still running on it (a worker that has not rebuilt yet) must never meet it closed.

function fixture() {
  const built: string[] = [];
  const closed: string[] = [];
  const ran: string[] = [];
  const Plugin = kongPluginClass(
    'fixture',
    (config) => config as { v: string },
    (config): PluginCore => {
      const id = `${config.v}#${built.filter((b) => b.startsWith(`${config.v}#`)).length + 1}`;
      built.push(id);
      return {
        access: () => {
          ran.push(id);
          return CONTINUE;
        },
        close: async () => void closed.push(id),
      };
    },
    {},
    undefined,
    { retireAfterMs: 0 },
  );
  return { Plugin, built, closed, ran };
}

/** Just enough of one request's PDK for a core that lets every request through. */
const kong = (): KongPdk =>
  ({
    request: { getHeaders: async () => ({}), getHeader: async () => undefined, getMethod: async () => 'GET', getPath: async () => '/v1/models' },
    client: { getForwardedIp: async () => '192.0.2.1', loadConsumer: async () => undefined, authenticate: async () => undefined },
    ctx: { shared: { get: async () => undefined, set: async () => undefined } },
    service: { request: { setHeaders: async () => undefined, clearHeader: async () => undefined } },
    response: { setHeaders: async () => undefined, exit: async () => undefined },
    log: { warn: async () => undefined, err: async () => undefined },
  }) as KongPdk;

test('an entity started with a new configuration: the former core is closed; one still in use by another entity is kept', async (t) => {
  const { Plugin, built, closed } = fixture();
  // Two workers, one configuration: one core.
  new Plugin({ v: 'a', __plugin_id: 'P' });
  new Plugin({ v: 'a', __plugin_id: 'P' });
  // Two entities sharing one configuration.
  new Plugin({ v: 'shared', __plugin_id: 'R' });
  new Plugin({ v: 'shared', __plugin_id: 'S' });
  t.deepEqual(built, ['a#1', 'shared#1']);

  new Plugin({ v: 'b', __plugin_id: 'R' }); // S still runs `shared`
  new Plugin({ v: 'c', __plugin_id: 'P' });
  await waitFor(() => closed.includes('a#1'), 5000, "the former configuration's core closed");
  t.deepEqual(closed, ['a#1'], 'the shared core, retired first if at all, is still open');
  t.deepEqual(built, ['a#1', 'shared#1', 'b#1', 'c#1']);
});

test('an instance of a closed configuration builds it again for its requests, and that core goes again when unused', async (t) => {
  const { Plugin, closed, ran } = fixture();
  const stale = new Plugin({ v: 'a', __plugin_id: 'P' });
  new Plugin({ v: 'b', __plugin_id: 'P' });
  await waitFor(() => closed.includes('a#1'), 5000, 'the former core closed');
  await stale.access(kong());
  t.deepEqual(ran, ['a#2'], 'a request never meets a closed core');
  await waitFor(() => closed.includes('a#2'), 5000, 'the rebuilt core closed once unused');
  t.false(closed.some((c) => c.startsWith('b#')));
});

test('a configuration started again before its core is closed keeps its core', async (t) => {
  const { Plugin, built, closed } = fixture();
  new Plugin({ v: 'a', __plugin_id: 'P' });
  new Plugin({ v: 'b', __plugin_id: 'P' });
  new Plugin({ v: 'a', __plugin_id: 'P' }); // reverted at once: `b` goes, `a` stays
  await waitFor(() => closed.includes('b#1'), 5000, 'the reverted-from core closed');
  t.deepEqual(closed, ['b#1']);
  t.deepEqual(built, ['a#1', 'b#1']);
});
