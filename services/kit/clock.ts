/** Time source. Everything whose behaviour depends on time takes a Clock, so tests never wait on wall time. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock that moves only when told to, or a fixed offset from real time (for child processes). */
export class ManualClock implements Clock {
  constructor(private current = Date.now()) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
  set(ms: number): void {
    this.current = ms;
  }
}

export function offsetClock(offsetMs: number, base: Clock = systemClock): Clock {
  return { now: () => base.now() + offsetMs };
}

export const unixSeconds = (clock: Clock = systemClock): number => Math.floor(clock.now() / 1000);

/**
 * The offset that puts `base` 1 s into the next minute window: tests and benchmarks that count
 * against per-minute limits start at a window boundary, so their requests fall in one window.
 */
export function offsetToNextMinute(base: Clock = systemClock): number {
  const now = base.now();
  return Math.ceil(now / 60_000) * 60_000 + 1_000 - now;
}
