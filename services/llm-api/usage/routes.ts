import { once } from 'node:events';
import { z } from 'zod';
import { listOf, routeGroup, type Route } from '../../kit/index.js';
import { filterOf, ownUsage, usageCsv, usageQuery, usageReport, usageRowSchema, type UsageReportDeps } from './report.js';

// Every row, always: the download pages itself (by group key), so it takes no limit or offset.
const exportQuery = usageQuery.omit({ limit: true, offset: true }).extend({ format: z.enum(['csv']).default('csv') });
const usage = routeGroup({ tag: 'usage' });
/** The caller's report and everyone's take the same filters and answer the same rows. */
const report = { request: { query: usageQuery }, response: { schema: listOf(usageRowSchema) } };

/**
 * Waits until `res` takes more (`drain`); false when the client went away first, which a closed
 * connection's `drain` never tells (without this the export waited forever, holding its query).
 */
async function drained(res: NodeJS.EventEmitter, signal: AbortSignal): Promise<boolean> {
  try {
    await once(res, 'drain', { signal });
    return true;
  } catch (error) {
    if (signal.aborted) return false;
    throw error;
  }
}

/** Usage and cost reports: the caller's own, everyone's (admin), and everyone's as a CSV stream. */
export function usageRoutes(deps: { usageReports: UsageReportDeps }): Route[] {
  return [
    usage.get('/v1/usage', {
      summary: "The caller's usage and cost, from the daily rollup (filters, group_by, paginated)",
      access: 'user',
      ...report,
      handler: ({ principal, query }) => ownUsage(deps.usageReports, principal, query),
    }),
    usage.get('/v1/admin/usage', {
      summary: "Everyone's usage and cost, from the daily rollup (filters, group_by, paginated)",
      access: 'admin',
      ...report,
      handler: ({ query }) => usageReport(deps.usageReports, filterOf(query), query.group_by, query),
    }),
    usage.get('/v1/admin/usage/export', {
      summary: "Everyone's usage and cost as CSV (same filters and group_by; streamed)",
      access: 'admin',
      request: { query: exportQuery },
      response: { contentType: 'text/csv' },
      handler: async ({ query, res, signal }) => {
        const filter = filterOf(query);
        let started = false;
        for await (const line of usageCsv(deps.usageReports, filter, query.group_by)) {
          if (signal.aborted) break;
          // The CSV head goes with the first line (read after the first page): until then an error is answered as JSON.
          if (!started) {
            started = true;
            res.status(200).setHeader('content-type', 'text/csv; charset=utf-8');
            res.setHeader('content-disposition', 'attachment; filename="usage.csv"');
          }
          if (!res.write(line) && !(await drained(res, signal))) break;
        }
        res.end();
      },
    }),
  ];
}
