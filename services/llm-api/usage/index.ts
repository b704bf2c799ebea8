import type { LlmApiResource } from '../resource.js';
import { startHoldPurge } from './budgets.js';
import { spendCountersPeriodIndex, spendHoldExpiry, spendHolds, spendHoldsAdmittedIndex, spendSettledCount, spendTables, usageCachedTokens, usageRollupTables } from './migrations.js';
import { usageRoutes } from './routes.js';

export type { UsageReportDeps } from './report.js';
export { admitRequest, createSpendLimitsCache, getSpendLimits, hasSpendInput, modelAccess, setSpendLimits, spendFields, spendLimitsPort, type SpendDeps, type SpendInput, type SpendLimitsPort, type SpendView } from './budgets.js';

/** Usage and cost reports (the raw usage table and the writer belong to chat's request path). */
export const usageResource: LlmApiResource = {
  name: 'usage',
  migrations: [usageRollupTables, spendTables, spendSettledCount, usageCachedTokens, spendHolds, spendHoldsAdmittedIndex, spendHoldExpiry, spendCountersPeriodIndex],
  routes: (deps) => usageRoutes(deps),
  start(deps, ctx) {
    // Holds of requests that never settled, on counters no admission visits any more (a period that is over).
    const purge = startHoldPurge({ ...deps.spend, logger: ctx.runtime.logger });
    ctx.onStop(() => purge.stop());
  },
};
