/**
 * A task run every `everyMs`, the next run counted from the end of the last, so runs never
 * overlap. A failed run goes to `onError` and the next one still comes. `stop()` cancels the next
 * run and waits for one in progress. The timer keeps no process alive.
 */
export interface Periodic {
  stop(): Promise<void>;
}

export function runEvery(everyMs: number, task: () => Promise<unknown>, onError: (error: Error) => void): Periodic {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  const schedule = () => {
    timer = setTimeout(() => {
      running = task().then(
        () => {},
        (error: Error) => onError(error),
      );
      void running.finally(() => timer && schedule());
    }, everyMs);
    timer.unref();
  };
  schedule();
  return {
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
