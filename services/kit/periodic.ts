/**
 * A task run every `everyMs`, the next run counted from the end of the last, so runs never
 * overlap. A failed run goes to `onError` (always with an `Error`, whatever the task rejected with)
 * and the next one still comes; an `onError` that throws is reported as a process warning, never as
 * an unhandled rejection. `stop()` cancels the next run and waits for one in progress. The timer
 * keeps no process alive.
 *
 * The first run comes after `everyMs`, or at once (on the next turn of the event loop) with
 * `{immediate: true}`, for jobs that should also run when they start.
 */
export interface Periodic {
  stop(): Promise<void>;
}

export interface RunEveryOptions {
  /** Run the task at once as well, not only after the first `everyMs`. */
  immediate?: boolean;
}

export function runEvery(everyMs: number, task: () => Promise<unknown>, onError: (error: Error) => void, options: RunEveryOptions = {}): Periodic {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  const schedule = (delayMs: number) => {
    timer = setTimeout(() => {
      running = Promise.resolve()
        .then(task)
        .then(
          () => {},
          (error: unknown) => {
            try {
              onError(error instanceof Error ? error : new Error(`periodic task failed with ${String(error)}`));
            } catch (reportFailure) {
              process.emitWarning(`periodic task: reporting a failed run failed: ${(reportFailure as Error)?.message ?? String(reportFailure)}`);
            }
          },
        );
      void running.finally(() => timer && schedule(everyMs));
    }, delayMs);
    timer.unref();
  };
  schedule(options.immediate ? 0 : everyMs);
  return {
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
