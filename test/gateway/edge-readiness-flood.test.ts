import test from 'ava';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEdge } from '../../services/gateway/edge.js';
import { systemClock } from '../../services/kit/clock.js';
import { createInProcessRevocations } from '../../services/kit/revocations.js';
import { silentLogger } from '../../plugins/core/index.js';
import { waitFor } from '../helpers/wait.js';
import { loadTestDeck } from './deck-fixture.js';

// The edge's /readyz is public and exempt from every limit, and each run of the process's checks
// is a database and a bus round trip: probes that arrive while a run is in flight share it.

/** The edge on the real deck with the given readiness checks, counting the requests its server received. */
async function edgeWith(readiness: Record<string, () => Promise<void>>) {
  const edge = await createEdge({
    deck: loadTestDeck(),
    deps: { clock: systemClock, logger: silentLogger, revocations: createInProcessRevocations() },
    trustedProxies: [],
    connectTimeoutMs: 1000,
    readTimeoutMs: 5000,
    readiness,
  });
  let received = 0;
  const server = createServer((req, res) => {
    received++;
    edge.handle(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received: () => received,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await edge.close();
    },
  };
}

/** A check that stays pending until released, counting its runs. */
function heldCheck() {
  let runs = 0;
  let release: () => void = () => {};
  let held = new Promise<void>((resolve) => (release = resolve));
  return {
    check: () => {
      runs++;
      return held;
    },
    runs: () => runs,
    release: () => release(),
    hold: () => void (held = new Promise<void>((resolve) => (release = resolve))),
  };
}

test('concurrent /readyz probes share one run of the checks instead of one database round trip each; a probe after the drain began gets a run of its own', async (t) => {
  const database = heldCheck();
  const readiness: Record<string, () => Promise<void>> = { database: database.check };
  const edge = await edgeWith(readiness);
  t.teardown(async () => {
    database.release();
    await edge.close();
  });

  const probes = Array.from({ length: 40 }, () => fetch(`${edge.url}/readyz`).catch((error: Error) => ({ status: error.message, body: null })));
  // The readiness route is reached in the same turn as the request (no limit, no credential on it).
  await waitFor(() => edge.received() === 40, 10_000, 'every probe received');
  t.is(database.runs(), 1, 'one run for every probe in flight');
  database.release();
  const answers = await Promise.all(probes);
  t.deepEqual(answers.map((r) => r.status), Array(40).fill(200));
  await Promise.all(answers.map((r) => r.body?.cancel()));

  // Once answered, the next probe runs the checks again: nothing is remembered past a run.
  database.hold();
  const before = fetch(`${edge.url}/readyz`);
  await waitFor(() => database.runs() === 2, 10_000, 'a fresh run');
  // A probe after the drain began (what the kit's markDraining does) does not share the run started before it.
  readiness.shutdown = () => Promise.reject(new Error('the process is shutting down'));
  const during = fetch(`${edge.url}/readyz`);
  await waitFor(() => database.runs() === 3, 10_000, 'a run of its own');
  database.release();
  t.is((await before).status, 200);
  const drained = await during;
  t.is(drained.status, 503);
  t.deepEqual(((await drained.json()) as { checks: unknown }).checks, { database: 'ok', shutdown: 'unavailable' });
});
