import test from 'ava';
import { createDatabase, isDependencyUnavailable } from '../../services/kit/index.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { dropSchema, uniqueName } from '../helpers/env.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_DATABASE_URL } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';
import { checkWrites, guestToken, isClean503, startConversationWrites } from '../helpers/write-load.js';

// PostgreSQL stops answering without closing anything: the fault proxy keeps every connection open
// and accepts new ones but forwards no byte (a frozen server, a black-holed network). Without a
// query timeout each request would wait forever; with DATABASE_QUERY_TIMEOUT_MS and
// DATABASE_CONNECT_TIMEOUT_MS every request is answered 503 `service_unavailable` instead. When the
// database answers again the platform serves by itself, and every write answered 2xx is readable.
const figures = reliabilityFigures('postgres-stall');
// Far above the configured timeouts: a request still unanswered by then counts as a hang.
const ANSWER_WITHIN_MS = 30_000;

let proxy: UrlFaultProxy;
let p: TestPlatform;
let token: string;

test.before(async () => {
  proxy = await startFaultProxyFor(TEST_DATABASE_URL, 5432);
  p = await startTestPlatform({ env: { DATABASE_URL: proxy.proxiedUrl, DATABASE_QUERY_TIMEOUT_MS: '1000', DATABASE_CONNECT_TIMEOUT_MS: '1000' } });
  token = await guestToken(p);
});
test.after.always(async () => {
  figures.write();
  proxy?.resume();
  await p?.stop();
  await proxy?.close();
});

test.serial('PostgreSQL stalled mid-flow: bounded 503s instead of hangs, recovery without help, every accepted write readable', async (t) => {
  const row = figures.row('PostgreSQL stalled (connections open, no bytes) while writes flow');
  const load = startConversationWrites(p, token, { workers: 3, answerWithinMs: ANSWER_WITHIN_MS });
  const ok = () => load.count((o) => o.status >= 200 && o.status < 300);
  const refused = () => load.count(isClean503);
  t.teardown(() => load.stop());
  try {
    await waitFor(() => ok() >= 20, 30_000, 'writes flowing before the stall');
    proxy.stall();
    row.faultsInjected++;
    await waitFor(() => refused() >= 6, 60_000, 'writes refused with 503 while the database is stalled');
    proxy.resume();
    const okAtResume = ok();
    await waitFor(() => ok() >= okAtResume + 20, 30_000, 'writes accepted again once the database answers');
  } catch (error) {
    t.log(load.outcomes.slice(-10).map((o) => `${o.status} ${JSON.stringify(o.body).slice(0, 300)}`).join('\n'));
    throw error;
  }
  await load.stop();

  if (await checkWrites(t, p, token, load, row)) row.faultsSurvived++;
});

test.serial('a statement over DATABASE_QUERY_TIMEOUT_MS is cancelled by the server as a dependency outage, and its connection serves the next query', async (t) => {
  const schema = uniqueName('stall');
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema, poolMax: 1, queryTimeoutMs: 200 });
  t.teardown(async () => {
    await db.close();
    await dropSchema(schema);
  });
  const pid = async () => (await db.knex.raw('select pg_backend_pid() as pid')).rows[0].pid as number;
  const before = await pid();
  const error = await t.throwsAsync(db.knex.raw('select pg_sleep(30)'));
  t.is((error as Error & { code?: string }).code, '57014');
  t.true(isDependencyUnavailable(error));
  // The server's cancellation left the one pooled connection usable: the same backend answers.
  t.is(await pid(), before);
});

test.serial('a query with no answer at all fails as a dependency outage, and its connection is not lent again', async (t) => {
  const ownProxy = await startFaultProxyFor(TEST_DATABASE_URL, 5432);
  const db = await createDatabase({ url: ownProxy.proxiedUrl, dataDir: '.', poolMax: 1, queryTimeoutMs: 200 });
  t.teardown(async () => {
    ownProxy.resume();
    await db.close();
    await ownProxy.close();
  });
  const pid = async () => (await db.knex.raw('select pg_backend_pid() as pid')).rows[0].pid as number;
  const before = await pid();
  ownProxy.stall();
  const error = await t.throwsAsync(pid());
  t.regex(error.message, /Query read timeout/);
  t.true(isDependencyUnavailable(error));
  ownProxy.resume();
  // The lost query's connection would still wait for its answer: the one pooled slot gets a new one.
  t.not(await pid(), before);
});
