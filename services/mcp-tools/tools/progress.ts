/**
 * Progress notifications while a tool call runs, for a client that asked for them (a
 * `progressToken` in the call's `_meta`). They carry no measure of the work (a Python program's
 * progress is unknown); they tell the client the call is alive, so one that resets its request
 * timeout on progress (the SDK client's `resetTimeoutOnProgress`) keeps waiting for a run longer
 * than its timeout (60 s by default, python_exec's longest run).
 */
export type ProgressReporter = (progress: number, message: string) => void;

/** How the ticks are scheduled: the system's timers, or a test's. */
export interface ProgressTimers {
  setInterval(tick: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
}

export const systemTimers: ProgressTimers = {
  setInterval: (tick, ms) => setInterval(tick, ms),
  clearInterval: (handle) => clearInterval(handle as NodeJS.Timeout),
};

/** The default of `MCP_PROGRESS_INTERVAL_MS`: well inside the SDK client's default 60 s timeout. */
export const PROGRESS_INTERVAL_MS = 10_000;

/**
 * Reports progress every `intervalMs` (1, 2, 3…: the value must grow with each notification) until
 * the returned function is called, which the caller does as soon as the call ends, however it ends.
 */
export function reportProgressEvery(report: ProgressReporter, intervalMs: number, timers: ProgressTimers, tool: string): () => void {
  let ticks = 0;
  const handle = timers.setInterval(() => {
    ticks++;
    report(ticks, `${tool} is still running (${Math.round((ticks * intervalMs) / 1000)} s)`);
  }, intervalMs);
  return () => timers.clearInterval(handle);
}
