import test from 'ava';
import { startTestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { call } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

// The periodic identity sweeps (expired API keys, ended refresh families, stale sign-in failure
// counters) run on the kit's runEvery: they run on their own, one run at a time, and stopping the
// service waits for a run in progress instead of leaving it to hit a closed database (that wait is
// runEvery's own, proved in the kit's tests).
test('expired API keys are swept on their own every API_KEY_SWEEP_INTERVAL_MS, and the service with its sweep timer then stops cleanly', async (t) => {
  const svc = await startTestService(llmApiService, { env: { API_KEY_SWEEP_INTERVAL_MS: '1000' } });
  try {
    const knex = svc.runtime.db.knex;
    const user = await createTestUser(knex);
    const created = await call(svc, 'POST', '/auth/api-keys', { headers: edgeHeaders(svc.gatewaySecret, user), body: { expires_in_days: 1 } });
    t.is(created.status, 201, JSON.stringify(created.body));
    await knex('identity_api_keys').where({ id: created.body.id }).update({ expires_at: Date.now() - 1000 });
    // The sweep runs on its own timer (no event to await): poll, bounded.
    await waitFor(async () => (await knex('identity_api_keys').where({ id: created.body.id }).first()) === undefined, 10_000, 'the sweep deleting the expired key', 100);
    t.is(await knex('identity_api_keys').where({ id: created.body.id }).first(), undefined);
  } finally {
    await svc.close();
  }
});
