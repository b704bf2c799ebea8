/**
 * Counter backends behind one small interface (like Kong's rate-limiting `policies/`). A hit checks
 * every window and increments all of them only when none is at its limit — atomically, so nodes
 * sharing a backend never overshoot. Window boundaries come from the caller's clock (keys carry the
 * window start); backend expiry only cleans up.
 */
import type { MaybePromise } from '../../../services/kit/core/index.js';
export interface CounterWindow {
  key: string;
  limit: number;
  /** Cleanup horizon for the backend (ms); not used for window arithmetic. */
  ttlMs: number;
}

export interface HitResult {
  allowed: boolean;
  /** Count per window after this hit (or the current count when refused). */
  counts: number[];
  /** Index of the first window at its limit when refused. */
  blocked: number;
}

export interface CounterStore {
  readonly name: string;
  /**
   * A plain result when the counters are in process (no turn of the event loop per request), a promise otherwise.
   * With `firstStage` (0 < firstStage < windows.length), the first `firstStage` windows are one hit and
   * the rest another, taken in that order in one atomic step: the first stage's increments stay when
   * the second is refused, exactly as two hits one after the other, in one call. Without it, or outside
   * that range (0 included), all windows are one hit.
   */
  hit(windows: CounterWindow[], nowMs: number, firstStage?: number): MaybePromise<HitResult>;
  close(): Promise<void>;
}
