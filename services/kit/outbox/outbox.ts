import type { Knex } from 'knex';
import type { Bus } from '../bus/types.js';
import type { Clock } from '../clock.js';
import { idleBackoff } from '../db/idle-backoff.js';
import { isDependencyUnavailable } from '../errors.js';
import { newId } from '../ids.js';
import type { Logger } from '../logger.js';
import { runEvery, type Periodic } from '../periodic.js';

/** Rows deleted per statement when published events are pruned. */
const PRUNE_BATCH = 1000;

/** Refusals of one row by the bus (not a broker away) before it is parked. */
export const OUTBOX_PUBLISH_ATTEMPTS = 10;

/** How long a row waits after its `failures`-th refusal before it is offered again: 1 s, doubling, at most 5 minutes. */
export function outboxRetryDelayMs(failures: number): number {
  return Math.min(1000 * 2 ** Math.max(0, failures - 1), 5 * 60_000);
}

/**
 * The transactional outbox. Domain code calls `recordEvent(trx, type, data)` inside the
 * transaction that makes the change, so an event exists exactly when its change committed.
 * The relay publishes pending rows in the order they were recorded (`seq`) and marks them sent only
 * after the broker confirmed; several relays may run (rows are claimed with SKIP LOCKED under a
 * lease). That is not a delivery order: a transaction that commits after one that recorded later
 * has its events published after those, several relays publish side by side, and a failed pass
 * publishes its rows again (at least once). Consumers never rely on order (docs/webhooks.md). Published
 * rows are deleted once older than the retention (`retentionMs`, OUTBOX_RETENTION_HOURS); rows
 * not yet published are never deleted.
 *
 * A row the bus refuses for good (an error that does not say the broker is away) does not hold back
 * the rows after it: the pass goes on with them, and the refused row is offered again after
 * `outboxRetryDelayMs` (growing with its refusals). After OUTBOX_PUBLISH_ATTEMPTS refusals it is
 * parked: kept with `dead_at` set, logged once with its id, counted by `outbox_events_dead`, never
 * offered again until an operator clears `dead_at`. A broker away stops the pass and charges no row.
 */

/** The message every event travels as on the bus; webhook delivery wraps it in SPEC.md 6.3. */
export interface EventMessage<T = Record<string, unknown>> {
  id: string;
  type: string;
  /**
   * Database time of the change (when it was recorded, not when its transaction began), ISO 8601
   * in UTC with microseconds (PostgreSQL's precision), so consumers can compare it exactly with
   * other database timestamps (webhook fan-out does).
   */
  occurred_at: string;
  data: T;
}

/**
 * `occurred_at` is the database's clock when the event is recorded (`clock_timestamp()`), not its
 * transaction's start (`now()`, the column's default): in a transaction that runs a while, the
 * change happens when it is recorded. Subscriptions take their `subscribed_at` the same way, so
 * "created before the event" compares two moments of one clock: a subscription created while a
 * long transaction ran still receives the events that transaction records after it, and never the
 * ones recorded before it.
 */
export async function recordEvent(trx: Knex | Knex.Transaction, type: string, data: Record<string, unknown>): Promise<string> {
  const id = newId('event');
  await trx('outbox_events').insert({ id, type, data: JSON.stringify(data), occurred_at: trx.raw('clock_timestamp()') });
  wakeRelaysAfterCommit(trx);
  return id;
}

/**
 * The started relays of this process. A commit that recorded events wakes them, so its events are
 * published at once rather than at the next poll (`pollMs`, 500 ms by default, which was all of an
 * event's commit-to-delivery latency). The poll stays for what no wake-up announces: events another
 * process committed, and retries.
 */
const startedRelays = new Set<() => void>();
/** Transactions already hooked: a burst of events in one transaction wakes the relays once. */
const hooked = new WeakSet<object>();

function wakeRelays(): void {
  for (const wake of startedRelays) wake();
}

function wakeRelaysAfterCommit(trx: Knex | Knex.Transaction): void {
  if (startedRelays.size === 0) return;
  if (!trx.isTransaction) return wakeRelays();
  if (hooked.has(trx)) return;
  hooked.add(trx);
  // A savepoint's promise settles at its release, before the outer commit: that wake-up finds
  // nothing yet, and the poll publishes the events as before. A rollback wakes nobody.
  (trx as Knex.Transaction).executionPromise.then(wakeRelays, () => {});
}

export interface OutboxRelayOptions {
  knex: Knex;
  bus: Bus;
  clock: Clock;
  logger: Logger;
  pollMs?: number;
  /**
   * Set where this process is the database's only client (the embedded database): every event is
   * then recorded here and wakes the relay, so the poll only catches what a failed pass left behind.
   * Each pass that publishes nothing doubles the wait before the next, from `pollMs` up to this; one
   * that publishes brings it back. Unset: one pass per `pollMs`.
   */
  idlePollMaxMs?: number;
  batchSize?: number;
  /** How long a claimed batch is reserved for this relay before another may take it. */
  leaseMs?: number;
  /** Published rows older than this (by the relay's clock) are deleted. Unset: kept. */
  retentionMs?: number;
  /** How often a started relay deletes them (default 10 minutes). */
  pruneEveryMs?: number;
}

export interface OutboxRelay {
  start(): void;
  /** Publishes what is pending now; resolves with the number published. */
  drain(): Promise<number>;
  /** Ask for a pass soon. Commits that record events do it by themselves (`recordEvent`). */
  kick(): void;
  /** Deletes the published rows older than the retention now; resolves with how many (0 without a retention). */
  prune(): Promise<number>;
  /** The wait between passes while nothing is published: `pollMs`, or what it backed off to (`idlePollMaxMs`). */
  readonly idleWaitMs: number;
  stop(): Promise<void>;
}

interface PendingRow {
  id: string;
  type: string;
  /** Refusals of this row by the bus so far. */
  publish_failures: number;
  data: Record<string, unknown>;
  /** Already formatted by the claim query (microseconds kept). */
  occurred_at: string;
}

export function createOutboxRelay(options: OutboxRelayOptions): OutboxRelay {
  const { knex, bus, clock, logger } = options;
  const batchSize = options.batchSize ?? 100;
  const leaseMs = options.leaseMs ?? 30_000;
  let running = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> = Promise.resolve();
  let failures = 0;
  const pollMs = options.pollMs ?? 500;
  const idleWait = idleBackoff(pollMs, options.idlePollMaxMs);
  /** A pass is running; a kick meanwhile asks for another right after it instead of a second pass at once. */
  let passing = false;
  let kickedDuringPass = false;

  // One statement, autocommit: PGlite's single connection is never held across the publish.
  async function claim(): Promise<PendingRow[]> {
    const now = clock.now();
    const result = await knex.raw(
      `update outbox_events set locked_until = ?, attempts = attempts + 1
         where id in (
           select id from outbox_events
            where published_at is null and dead_at is null and locked_until < ?
            order by seq
            limit ?
            for update skip locked)
       returning id, type, data, seq, publish_failures,
                 to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as occurred_at`,
      [now + leaseMs, now, batchSize],
    );
    return ((result.rows ?? []) as (PendingRow & { seq: number })[]).sort((a, b) => a.seq - b.seq);
  }

  /**
   * A row the bus refused (not a broker away): offered again after its delay, or parked after
   * OUTBOX_PUBLISH_ATTEMPTS refusals. Its lease holds it meanwhile (no other relay touches it).
   */
  async function refused(row: PendingRow, error: unknown): Promise<void> {
    const failures = row.publish_failures + 1;
    const now = clock.now();
    const park = failures >= OUTBOX_PUBLISH_ATTEMPTS;
    await knex('outbox_events')
      .where({ id: row.id })
      .update({ publish_failures: failures, locked_until: now + outboxRetryDelayMs(failures), ...(park ? { dead_at: new Date(now) } : {}) });
    const err = (error as Error)?.message ?? String(error);
    if (park) {
      logger.error({ event_id: row.id, type: row.type, failures, err }, 'outbox event parked: the bus kept refusing it; it is kept with dead_at set and never offered again (outbox_events_dead)');
    } else if (failures === 1) {
      logger.warn({ event_id: row.id, type: row.type, err }, 'outbox event refused by the bus; later events go on, this one is offered again with a growing delay');
    }
  }

  async function passOnce(): Promise<{ published: number; claimed: number }> {
    const rows = await claim();
    const sent: string[] = [];
    let unavailable: unknown;
    let tried = 0;
    for (const row of rows) {
      const message: EventMessage = {
        id: row.id,
        type: row.type,
        occurred_at: row.occurred_at,
        data: row.data,
      };
      try {
        // On PGlite (the embedded queue) a publish is synchronous database work: let I/O run between rows.
        await new Promise<void>((resolve) => setImmediate(resolve));
        await bus.publish(row.type, message, { messageId: row.id });
        sent.push(row.id);
      } catch (e) {
        // The broker away: no row is at fault; the pass stops and the relay backs off.
        if (isDependencyUnavailable(e)) {
          unavailable = e;
          break;
        }
        await refused(row, e);
      }
      tried++;
    }
    // The relay's clock, like the lease: the retention is measured from it.
    if (sent.length) await knex('outbox_events').whereIn('id', sent).update({ published_at: new Date(clock.now()) });
    const untried = rows.slice(tried).map((r) => r.id);
    if (untried.length) await knex('outbox_events').whereIn('id', untried).update({ locked_until: 0 });
    if (unavailable) throw unavailable;
    return { published: sent.length, claimed: rows.length };
  }

  async function drain(): Promise<number> {
    let total = 0;
    for (;;) {
      const { published, claimed } = await passOnce();
      total += published;
      if (claimed < batchSize) return total;
    }
  }

  // In batches, each one autocommit statement (PGlite's single connection is never held long).
  async function prune(): Promise<number> {
    if (options.retentionMs === undefined) return 0;
    const cutoff = new Date(clock.now() - options.retentionMs);
    let total = 0;
    for (;;) {
      const batch = knex('outbox_events').select('id').whereNotNull('published_at').andWhere('published_at', '<', cutoff).limit(PRUNE_BATCH);
      const n = await knex('outbox_events').whereIn('id', batch).del();
      total += n;
      if (n < PRUNE_BATCH) return total;
    }
  }

  function schedule(delay: number) {
    if (!running) return;
    clearTimeout(timer);
    timer = setTimeout(tick, delay);
  }

  function tick() {
    passing = true;
    kickedDuringPass = false;
    current = drain()
      .then((published) => {
        failures = 0;
        passing = false;
        const waitMs = idleWait.polled(published > 0);
        schedule(kickedDuringPass ? 0 : waitMs);
      })
      .catch((error: Error) => {
        failures++;
        passing = false;
        if (failures === 1 || failures % 20 === 0) logger.warn({ err: error.message, failures }, 'outbox relay could not publish; events wait in the outbox');
        schedule(Math.min(pollMs * 2 ** Math.min(failures, 5), 10_000));
      });
  }

  // While the broker is failing the backoff decides, not commits.
  function kick() {
    if (!running || failures > 0) return;
    if (passing) kickedDuringPass = true;
    else schedule(0);
  }

  let pruner: Periodic | undefined;

  return {
    start() {
      if (running) return;
      running = true;
      startedRelays.add(kick);
      schedule(0);
      if (options.retentionMs !== undefined) {
        pruner = runEvery(options.pruneEveryMs ?? 10 * 60_000, prune, (error) => logger.warn({ err: error.message }, 'outbox: deleting old published events failed; the next interval tries again'));
      }
    },
    drain: () => drain(),
    kick,
    prune,
    get idleWaitMs() {
      return idleWait.waitMs;
    },
    async stop() {
      running = false;
      startedRelays.delete(kick);
      clearTimeout(timer);
      const pruning = pruner?.stop();
      pruner = undefined;
      await current.catch(() => {});
      await pruning;
    },
  };
}
