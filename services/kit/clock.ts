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
