import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import { startTestPlatform } from '../helpers/platform.js';

// `npm start`'s stop drains its servers (the edge first, then the services) under one deadline of
// SHUTDOWN_TIMEOUT_MS: a server closed after others gets what is left of it, never a fresh one, so
// the whole drain stays within SHUTDOWN_TIMEOUT_MS. The platform's clock stands in for the time
// each drain takes.

test('the servers share one drain deadline: each gets what the ones before it left', async (t) => {
  const clock = new ManualClock();
  const p = await startTestPlatform({ clock, env: { SHUTDOWN_TIMEOUT_MS: '10000' } });
  const given: Array<[string, number]> = [];
  // The first server's drain takes 4 s, the second's 7 s: the 10 s are spent by then.
  const takes = [4_000, 7_000];
  for (const s of p.platform.started) {
    const close = s.server.close;
    s.server.close = (timeoutMs) => {
      given.push([s.name, timeoutMs]);
      clock.advance(takes[given.length - 1] ?? 0);
      return close(timeoutMs);
    };
  }
  await p.stop();
  const names = [...p.platform.started].reverse().map((s) => s.name);
  t.is(names[0], 'gateway');
  t.deepEqual(
    given,
    names.map((name, i) => [name, i === 0 ? 10_000 : i === 1 ? 6_000 : 0]),
  );
});
