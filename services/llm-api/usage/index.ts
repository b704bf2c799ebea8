import type { LlmApiResource } from '../resource.js';
import { spendHolds, spendSettledCount, spendTables, usageCachedTokens, usageRollupTables } from './migrations.js';
import { usageRoutes } from './routes.js';

export type { UsageReportDeps } from './report.js';
export { admitRequest, createSpendLimitsCache, getSpendLimits, hasSpendInput, modelAccess, setSpendLimits, spendFields, spendLimitsPort, type SpendDeps, type SpendInput, type SpendLimitsPort, type SpendView } from './budgets.js';

/** Usage and cost reports (the raw usage table and the writer belong to chat's request path). */
export const usageResource: LlmApiResource = {
  name: 'usage',
  migrations: [usageRollupTables, spendTables, spendSettledCount, usageCachedTokens, spendHolds],
  routes: (deps) => usageRoutes(deps),
};
