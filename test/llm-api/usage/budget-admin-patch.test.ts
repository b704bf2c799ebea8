import test from 'ava';
import type { Knex } from 'knex';
import { ManualClock } from '../../../services/kit/index.js';
import { createUserAdmin } from '../../../services/llm-api/identity/admin-users/domain.js';
import type { ApiKeys } from '../../../services/llm-api/identity/api-keys/domain.js';
import { createApiKeyStore } from '../../../services/llm-api/identity/api-keys/store.js';
import type { IdentityProvider } from '../../../services/llm-api/identity/providers/types.js';
import { createIdentityUsersStore, type UserRecord } from '../../../services/llm-api/identity/store.js';
import type { RefreshTokens } from '../../../services/llm-api/identity/tokens/refresh-tokens.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { readSpend } from '../../../services/llm-api/usage/budgets-store.js';
import { getSpendLimits, spendLimitsPort, writeSpendLimits, type SpendLimitsPort } from '../../../services/llm-api/usage/budgets.js';
import { openTestRuntime } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';

// An administrator's PATCH of a user that changes both its standing at the identity provider
// (`disabled`, a network call to Keycloak) and its budget's period (which seeds the new period's
// spend counter): the counter's row, which every chat request of the user updates at admission,
// is not locked while the provider is called; and a failure on either side leaves nothing half
// written. Real PostgreSQL (own schema): row locks are what is tested.
let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let knex: Knex;
test.before(async () => {
  runtime = await openTestRuntime({ migrations: llmApiService.migrations, bus: 'pg' });
  knex = runtime.db.knex;
});
test.after.always(async () => {
  await runtime?.dispose();
});

const NOW = Date.parse('2026-12-07T12:00:00Z');
const MONTH = '2026-12-01';

/** A provider whose `setEnabled` runs `during` (the test's probe) and records each call; the rest is never called here. */
function providerStub(during: (user: UserRecord, enabled: boolean) => Promise<void>): IdentityProvider & { calls: boolean[] } {
  const calls: boolean[] = [];
  return {
    kind: 'keycloak',
    calls,
    async setEnabled(user: UserRecord, enabled: boolean) {
      calls.push(enabled);
      await during(user, enabled);
    },
  } as unknown as IdentityProvider & { calls: boolean[] };
}

function userAdmin(provider: IdentityProvider, spend: SpendLimitsPort = spendLimitsPort({ clock: new ManualClock(NOW) })) {
  return createUserAdmin({
    knex,
    userCache: { invalidate() {} },
    spend,
    users: createIdentityUsersStore(knex),
    keyStore: createApiKeyStore(knex),
    apiKeys: { revokeAllOf: async () => {}, userChanged: async () => {} } as unknown as ApiKeys,
    refreshTokens: { revokeUser: async () => 0 } as unknown as RefreshTokens,
    provider,
    logger: { error() {} },
  });
}

/** A disabled user with a daily budget whose monthly counter row exists (it had a monthly budget earlier this month). */
async function disabledUserWithDailyBudget() {
  const { id } = await createTestUser(knex);
  await knex('users').where({ id }).update({ disabled: true });
  await writeSpendLimits(knex, new ManualClock(NOW), 'user', id, { budget_period: 'day', max_budget_micro_usd: 5_000_000 });
  await knex('llm_spend_counters').insert({ scope: 'user', scope_id: id, period_start: MONTH, spent_micro_usd: 100 });
  await knex('llm_usage_daily').insert({ day: '2026-12-03', user_id: id, api_key_id: '', model: 'm', provider_id: '', project_id: '', requests: 4, prompt_tokens: 40, completion_tokens: 20, reasoning_tokens: 0, cost_micro_usd: 4000 });
  return id;
}

/** Whether another connection can take the monthly counter's row at once (as an admission's update would). */
async function counterFree(id: string): Promise<boolean> {
  return knex.transaction(async (trx) => {
    await trx.raw("set local lock_timeout = '200ms'");
    try {
      await trx('llm_spend_counters').where({ scope: 'user', scope_id: id, period_start: MONTH }).forUpdate().first();
      return true;
    } catch (error) {
      if ((error as { code?: string }).code === '55P03') return false; // lock_not_available
      throw error;
    }
  });
}

test('the spend counter is not locked while the identity provider is called', async (t) => {
  const id = await disabledUserWithDailyBudget();
  let freeDuringCall: boolean | undefined;
  const provider = providerStub(async () => {
    freeDuringCall = await counterFree(id);
  });
  const answer = await userAdmin(provider).patch('user_admin', id, { disabled: false, spend: { budget_period: 'month' } });
  t.deepEqual(provider.calls, [true]);
  t.true(freeDuringCall, 'chat admissions of the user do not wait for the provider');
  t.like(answer, { disabled: false, budget_period: 'month', max_budget_micro_usd: 5_000_000 });
  t.is(Number((await readSpend(knex, 'user', id, MONTH)).spent_micro_usd), 4000, 'the monthly counter seeded from the month’s usage');
});

test('a provider that refuses the change leaves the user, its budget and its counter as they were', async (t) => {
  const id = await disabledUserWithDailyBudget();
  const provider = providerStub(async () => {
    throw new Error('keycloak: 503');
  });
  await t.throwsAsync(userAdmin(provider).patch('user_admin', id, { disabled: false, spend: { budget_period: 'month' } }), { message: 'keycloak: 503' });
  t.true((await knex('users').where({ id }).first()).disabled);
  t.like(await getSpendLimits({ knex, clock: new ManualClock(NOW), logger: console }, 'user', id), { budget_period: 'day' });
  t.is(Number((await readSpend(knex, 'user', id, MONTH)).spent_micro_usd), 100);
});

test('a budget write that fails after the provider took the change sets the provider back', async (t) => {
  const id = await disabledUserWithDailyBudget();
  const provider = providerStub(async () => {});
  const real = spendLimitsPort({ clock: new ManualClock(NOW) });
  const failing: SpendLimitsPort = {
    ...real,
    apply: async () => {
      throw new Error('database went away');
    },
  };
  await t.throwsAsync(userAdmin(provider, failing).patch('user_admin', id, { disabled: false, spend: { budget_period: 'month' } }), { message: 'database went away' });
  t.deepEqual(provider.calls, [true, false], 'enabled, then disabled again');
  t.true((await knex('users').where({ id }).first()).disabled);
});

/** A realm that keeps each user's `enabled` as the provider last set it. */
function realm() {
  const enabled = new Map<string, boolean>();
  return { enabled, set: (user: UserRecord, value: boolean) => void enabled.set(user.id, value) };
}

test('a provider call that half applied (the update went through, then it failed) is set back', async (t) => {
  const id = await disabledUserWithDailyBudget();
  const state = realm();
  state.enabled.set(id, false);
  // The realm took `enabled`, then the logout (or the answer) failed.
  const provider = providerStub(async (user, enabled) => {
    state.set(user, enabled);
    if (enabled) throw new Error('keycloak: timed out');
  });
  await t.throwsAsync(userAdmin(provider).patch('user_admin', id, { disabled: false, spend: { budget_period: 'month' } }), { message: 'keycloak: timed out' });
  t.deepEqual(provider.calls, [true, false], 'set back to what the platform still says');
  t.false(state.enabled.get(id));
  t.true((await knex('users').where({ id }).first()).disabled);
});

test('a failed PATCH sets the provider back before a concurrent PATCH of the same user can change it', async (t) => {
  const id = await disabledUserWithDailyBudget();
  const state = realm();
  state.enabled.set(id, false);
  // The first PATCH's set-back is held until the second PATCH has finished or waits for the user's row.
  let holdSetBack!: () => void;
  const setBackHeld = new Promise<void>((resolve) => (holdSetBack = resolve));
  let setBackStarted!: () => void;
  const setBackReached = new Promise<void>((resolve) => (setBackStarted = resolve));
  const first = providerStub(async (user, enabled) => {
    if (!enabled) {
      setBackStarted();
      await setBackHeld;
    }
    state.set(user, enabled);
  });
  let firstPid = 0;
  const real = spendLimitsPort({ clock: new ManualClock(NOW) });
  const failing: SpendLimitsPort = {
    ...real,
    apply: async (trx) => {
      firstPid = (await trx.raw('select pg_backend_pid() as pid')).rows[0].pid;
      throw new Error('database went away');
    },
  };
  const firstPatch = userAdmin(first, failing).patch('user_admin', id, { disabled: false, spend: { budget_period: 'month' } });
  const firstDone = t.throwsAsync(firstPatch, { message: 'database went away' });
  await setBackReached;

  const second = providerStub(async (user, enabled) => state.set(user, enabled));
  let secondDone = false;
  const secondPatch = userAdmin(second)
    .patch('user_admin', id, { disabled: false })
    .finally(() => (secondDone = true));
  await waitFor(
    async () => {
      if (secondDone) return true;
      const blocked = await knex.raw('select count(*)::int as n from pg_stat_activity where ? = any(pg_blocking_pids(pid))', [firstPid]);
      return blocked.rows[0].n > 0;
    },
    10_000,
    'the second PATCH finished or waits for the first one’s lock',
  );
  holdSetBack();
  await firstDone;
  t.like(await secondPatch, { disabled: false });
  t.false((await knex('users').where({ id }).first()).disabled, 'the platform says enabled');
  t.true(state.enabled.get(id), 'and so does the provider: the set-back came before the second change');
  t.deepEqual(second.calls, [true]);
});
