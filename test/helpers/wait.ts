/**
 * Waits (bounded) until `check` returns something truthy, polling every `everyMs`. Only for state
 * that an asynchronous consumer changes without an event the test can await (a worker writing a
 * row, a pub/sub message arriving); it fails clearly when the bound passes.
 */
export async function waitFor<T>(
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  boundMs = 30_000,
  what = 'condition',
  everyMs = 25,
): Promise<T> {
  const deadline = Date.now() + boundMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} not reached within ${boundMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** A count, and promises that settle once it reaches a value. */
export function watched() {
  let value = 0;
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  return {
    set(next: number) {
      value = next;
      for (const w of waiters.filter((x) => value >= x.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    get: () => value,
    reached: (n: number) => (value >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
  };
}
