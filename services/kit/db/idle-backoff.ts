/**
 * The wait of a poll that exists for writes nothing announces in this process (`Database.soleClient`
 * says when there are none: the queue's shared look, the outbox relay). It stays at `pollMs` while
 * polls find work; each that finds none doubles it, up to `maxMs`. Without `maxMs` it never moves.
 */
export interface IdleBackoff {
  readonly waitMs: number;
  /** Records what a poll found; returns the wait before the next. */
  polled(foundWork: boolean): number;
}

export function idleBackoff(pollMs: number, maxMs: number | undefined): IdleBackoff {
  const bound = Math.max(pollMs, maxMs ?? 0);
  let waitMs = pollMs;
  return {
    get waitMs() {
      return waitMs;
    },
    polled(foundWork) {
      waitMs = foundWork ? pollMs : Math.min(waitMs * 2, bound);
      return waitMs;
    },
  };
}
