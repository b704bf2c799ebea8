/**
 * A process's readiness checks (database, bus, and `shutdown` from the moment a drain starts), run
 * by every `/readyz`: each service's and the edge's, so a load balancer reads every process alike.
 */
export type ReadinessChecks = Record<string, () => Promise<void>>;

export interface ReadinessReport {
  ready: boolean;
  checks: Record<string, 'ok' | 'unavailable'>;
}

/** A check that has not answered within this long counts as unavailable (a probe must answer). */
const CHECK_TIMEOUT_MS = 2000;

export async function checkReadiness(checks: ReadinessChecks, logger: { warn(fields: Record<string, unknown>, message: string): void }): Promise<ReadinessReport> {
  const report: ReadinessReport = { ready: true, checks: {} };
  await Promise.all(
    Object.entries(checks).map(async ([name, check]) => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([check(), new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS)))]);
        report.checks[name] = 'ok';
      } catch (error) {
        report.ready = false;
        report.checks[name] = 'unavailable';
        // The drain is announced once by the process; a failing dependency is worth a line per probe.
        if (name !== 'shutdown') logger.warn({ check: name, err: (error as Error).message }, 'readiness check failed');
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return report;
}
