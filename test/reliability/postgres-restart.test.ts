import test from 'ava';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-servers.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { waitFor } from '../helpers/wait.js';
import { checkWrites, guestToken, isClean503, startConversationWrites } from '../helpers/write-load.js';

// A real PostgreSQL (the test's own, never the shared server) is shut down and started again on
// the same port while conversations are written through the edge. Every request gets an answer
// within a bound (no hang): a 2xx, or a 503 `service_unavailable` in the error body. The platform
// reconnects by itself, and every write answered 2xx is readable afterwards. Each restart mode is
// one round: `fast` (clients disconnected, clean shutdown) and `immediate` (a crash, with recovery).
const figures = reliabilityFigures('postgres-restart');
const row = figures.row('PostgreSQL restarted while writes flow (fast and crash shutdown)');
const ANSWER_WITHIN_MS = 30_000;

let pg: PrivatePostgres;
let p: TestPlatform;
let token: string;

test.before(async () => {
  pg = await startPrivatePostgres();
  p = await startTestPlatform({ env: { DATABASE_URL: pg.url, DATABASE_QUERY_TIMEOUT_MS: '5000', DATABASE_CONNECT_TIMEOUT_MS: '3000' } });
  token = await guestToken(p);
});
test.after.always(async () => {
  figures.write();
  if (pg && !pg.running()) await pg.start().catch(() => {});
  await p?.stop().catch(() => {});
  await pg?.dispose();
});

test.serial('PostgreSQL restarted mid-flow: clean 503s while it is down, recovery without help, every accepted write readable', async (t) => {
  const load = startConversationWrites(p, token, { workers: 3, answerWithinMs: ANSWER_WITHIN_MS });
  const ok = () => load.count((o) => o.status >= 200 && o.status < 300);
  const refused = () => load.count(isClean503);
  t.teardown(() => load.stop());
  try {
    for (const mode of ['fast', 'immediate'] as const) {
      const okBefore = ok();
      await waitFor(() => ok() >= okBefore + 20, 30_000, `writes flowing before the ${mode} restart`);
      const refusedBefore = refused();
      await pg.stop(mode);
      row.faultsInjected++;
      await waitFor(() => refused() >= refusedBefore + 10, 30_000, `writes refused with 503 while PostgreSQL is down (${mode})`);
      await pg.start();
      const okAtStart = ok();
      await waitFor(() => ok() >= okAtStart + 20, 30_000, `writes accepted again after the ${mode} restart`);
    }
  } catch (error) {
    t.log(load.outcomes.slice(-10).map((o) => `${o.status} ${JSON.stringify(o.body).slice(0, 300)}`).join('\n'));
    t.log(pg.log().slice(-2000));
    throw error;
  }
  await load.stop();

  if (await checkWrites(t, p, token, load, row)) row.faultsSurvived += 2;
});
