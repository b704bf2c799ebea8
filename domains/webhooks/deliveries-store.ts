import type { Knex } from 'knex';
import type { Page } from '../../services/kit/index.js';
import type { WebhookRow } from './store.js';

/**
 * Deliveries and their attempts. Shared by the admin API (list, redeliver) and
 * workers/webhook-delivery (fan-out, claim, record). Every state change is one statement or one
 * short transaction, guarded by the attempt count it expects (compare-and-set), so duplicate jobs
 * for the same delivery can never record the same attempt twice.
 */
export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'dead';
export type AttemptOutcome = 'delivered' | 'retry' | 'failed' | 'dead';

/** What fan-out inserts: one event for one webhook. */
export interface NewDelivery {
  id: string;
  webhook_id: string;
  event_id: string;
  event_type: string;
  event_occurred_at: Date;
  event_data: Record<string, unknown>;
}

export interface DeliveryRow extends NewDelivery {
  status: DeliveryStatus;
  attempts: number;
  cycle_attempts: number;
  queued: boolean;
  lease_until: number;
  next_attempt_at: Date | null;
  /** When the sweep last re-enqueued it (since its last attempt), and how many times. */
  swept_at: Date | null;
  sweeps: number;
  /** Null until swept; then the time its next re-enqueue counts the grace period from (see `touch`). */
  resweep_after: Date | null;
  /** Computed by the database: `resweep_after` once swept, else `next_attempt_at`; what `overdue` reads (indexed). */
  sweep_due_at: Date | null;
  last_status_code: number | null;
  last_error: string | null;
  delivered_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface AttemptRow {
  id: number;
  delivery_id: string;
  attempt: number;
  retry_count: number;
  status_code: number | null;
  duration_ms: number;
  outcome: AttemptOutcome;
  error: string | null;
  response_excerpt: string | null;
  attempted_at: Date;
  next_attempt_at: Date | null;
}

export interface AttemptRecord {
  deliveryId: string;
  /** Attempts recorded before this one (the compare-and-set guard). */
  expectedAttempts: number;
  retryCount: number;
  statusCode: number | null;
  durationMs: number;
  outcome: AttemptOutcome;
  error: string | null;
  /** The first bytes of the receiver's answer, as they came (any bytes); stored as `excerptText` of them. */
  responseHead: Uint8Array | null;
  attemptedAt: Date;
  nextAttemptAt: Date | null;
}

/** Rows (or ids) per statement where a list can be long: well within PostgreSQL's 65,535 parameters. */
const STATEMENT_ROWS = 1000;

/** Re-enqueues of one overdue delivery back off up to 2^(this - 1) grace periods apart. */
const SWEEP_BACKOFF_STEPS = 7;

/** How much of a receiver's answer an attempt keeps (and the worker reads). */
export const RESPONSE_EXCERPT_BYTES = 512;

// C0 controls but tab, line feed and carriage return, and DEL. NUL is what PostgreSQL refuses in text.
const CONTROL = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F]/g;

/**
 * The one place a receiver's answer becomes stored text: at most RESPONSE_EXCERPT_BYTES, decoded as
 * UTF-8 with invalid sequences (a gzip or binary body, a character cut at the limit) replaced by
 * U+FFFD, control characters other than tab and line breaks removed. Always text PostgreSQL accepts
 * (it refuses NUL); null when nothing is left.
 */
export function excerptText(bytes: Uint8Array | null): string | null {
  if (!bytes || bytes.length === 0) return null;
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(0, RESPONSE_EXCERPT_BYTES)).replace(CONTROL, '');
  return text.length > 0 ? text : null;
}

// row_to_json renders timestamps as strings and bigints as numbers; the stores' rows carry Dates.
const DELIVERY_DATES = ['event_occurred_at', 'next_attempt_at', 'swept_at', 'resweep_after', 'sweep_due_at', 'delivered_at', 'created_at', 'updated_at'];
const WEBHOOK_DATES = ['previous_secret_expires_at', 'subscribed_at', 'created_at', 'updated_at'];
function revive(row: Record<string, unknown>, dates: string[]): Record<string, unknown> {
  const out = { ...row };
  for (const key of dates) if (typeof out[key] === 'string') out[key] = new Date(out[key] as string);
  return out;
}

/** A delivery and its subscription read as JSON in one query, with their Dates back. */
function withDates(row: { delivery: Record<string, unknown>; webhook: Record<string, unknown> | null }): { delivery: DeliveryRow; webhook: WebhookRow | undefined } {
  return { delivery: revive(row.delivery, DELIVERY_DATES) as unknown as DeliveryRow, webhook: row.webhook ? (revive(row.webhook, WEBHOOK_DATES) as unknown as WebhookRow) : undefined };
}

/**
 * One batch of the retention pass: at most `batch` ended deliveries last changed before `before`,
 * oldest first. The status list is written literally (not bound) so it matches the predicate of the
 * partial index `webhook_deliveries_ended_updated_at` under any plan, bound parameters or not.
 * Exported so the index suite can read the plan of the statement the store really sends.
 */
export function pruneEndedStatement(knex: Knex, before: Date, batch: number) {
  const ended = knex('webhook_deliveries')
    .select('id')
    .whereRaw("status in ('delivered', 'failed', 'dead')")
    .andWhere('updated_at', '<', before)
    .orderBy('updated_at')
    .limit(batch);
  // `= any(array(…))`, not `in (…)`: the ids are computed once, up front, and the delete then
  // finds each by its primary key. With `in` the planner may hash-join the batch against a scan of
  // the whole table, which is the cost the index is there to avoid.
  // The conditions again on the rows deleted: a delivery redelivered (pending again) while this
  // statement waited on its row is re-checked against them and kept.
  return knex('webhook_deliveries')
    .whereRaw('id = any(array(?))', [ended])
    .whereRaw("status in ('delivered', 'failed', 'dead')")
    .andWhere('updated_at', '<', before)
    .del();
}

export function createDeliveriesStore(knex: Knex) {
  const deliveries = () => knex<DeliveryRow>('webhook_deliveries');
  return {
    /**
     * Inserts the deliveries that do not exist yet (unique event_id + webhook_id), `STATEMENT_ROWS`
     * per statement: one event may match more subscriptions than PostgreSQL's 65,535 parameters of
     * one statement can carry. Each statement is idempotent, so a fan-out cut between two is redone.
     */
    async insertMissing(rows: NewDelivery[], now: Date): Promise<void> {
      for (let i = 0; i < rows.length; i += STATEMENT_ROWS) {
        await deliveries()
          .insert(rows.slice(i, i + STATEMENT_ROWS).map((r) => ({ ...r, event_data: JSON.stringify(r.event_data), next_attempt_at: now, created_at: now, updated_at: now })) as never)
          .onConflict(['event_id', 'webhook_id'])
          .ignore();
      }
    },

    /** Deliveries of an event whose first job was not handed to the bus yet. */
    async unqueued(eventId: string): Promise<Pick<DeliveryRow, 'id' | 'attempts'>[]> {
      return deliveries().where({ event_id: eventId, queued: false, status: 'pending' }).select('id', 'attempts');
    },

    async markQueued(ids: string[]): Promise<void> {
      for (let i = 0; i < ids.length; i += STATEMENT_ROWS) await deliveries().whereIn('id', ids.slice(i, i + STATEMENT_ROWS)).update({ queued: true } as never);
    },

    /** The delivery and its subscription, for an attempt. */
    async withWebhook(id: string): Promise<{ delivery: DeliveryRow; webhook: WebhookRow | undefined } | undefined> {
      // One round trip: on the embedded database every query is synchronous work on the main thread.
      const row = (await knex('webhook_deliveries as d')
        .leftJoin('webhooks as w', 'w.id', 'd.webhook_id')
        .where('d.id', id)
        .first(knex.raw('row_to_json(d.*) as delivery'), knex.raw('case when w.id is null then null else row_to_json(w.*) end as webhook'))) as
        | { delivery: Record<string, unknown>; webhook: Record<string, unknown> | null }
        | undefined;
      return row ? withDates(row) : undefined;
    },

    /**
     * Takes the right to make attempt `expected + 1` for `leaseMs`, and reads the delivery and its
     * subscription as they are now, in one statement; undefined when stale or taken. The lease is
     * set and judged by the database's clock, the one clock every worker shares: a worker whose own
     * clock runs ahead cannot take a lease still held, nor one running behind hand out a lease that
     * is already over for the others.
     */
    async claim(id: string, expected: number, leaseMs: number): Promise<{ delivery: DeliveryRow; webhook: WebhookRow | undefined } | undefined> {
      const result = await knex.raw(
        `with clock as (select (extract(epoch from now()) * 1000)::bigint as now_ms),
         claimed as (
           update webhook_deliveries set lease_until = (select now_ms from clock) + ?::bigint
            where id = ? and status = 'pending' and attempts = ? and lease_until < (select now_ms from clock)
           returning *)
         select row_to_json(c.*) as delivery, case when w.id is null then null else row_to_json(w.*) end as webhook
           from claimed c left join webhooks w on w.id = c.webhook_id`,
        [leaseMs, id, expected],
      );
      const row = (result.rows as Array<{ delivery: Record<string, unknown>; webhook: Record<string, unknown> | null }>)[0];
      return row ? withDates(row) : undefined;
    },

    /**
     * Records one attempt and the delivery's new state in one statement (the attempt row is written
     * only when the guarded update matched); false if another worker recorded it first.
     */
    async record(a: AttemptRecord): Promise<boolean> {
      const status: DeliveryStatus = a.outcome === 'retry' ? 'pending' : a.outcome;
      const result = await knex.raw(
        `with recorded as (
           update webhook_deliveries
              set status = ?, attempts = attempts + 1, cycle_attempts = cycle_attempts + 1, lease_until = 0, swept_at = null, sweeps = 0, resweep_after = null,
                  next_attempt_at = ?, last_status_code = ?, last_error = ?, delivered_at = ?, updated_at = ?
            where id = ? and attempts = ? and status = 'pending'
           returning id)
         insert into webhook_delivery_attempts
           (delivery_id, attempt, retry_count, status_code, duration_ms, outcome, error, response_excerpt, attempted_at, next_attempt_at)
         select id, ?::integer, ?::integer, ?::integer, ?::integer, ?::text, ?::text, ?::text, ?::timestamptz, ?::timestamptz from recorded
         returning delivery_id`,
        [
          status,
          a.nextAttemptAt,
          a.statusCode,
          a.error,
          a.outcome === 'delivered' ? a.attemptedAt : null,
          a.attemptedAt,
          a.deliveryId,
          a.expectedAttempts,
          a.expectedAttempts + 1,
          a.retryCount,
          a.statusCode,
          a.durationMs,
          a.outcome,
          a.error,
          excerptText(a.responseHead),
          a.attemptedAt,
          a.nextAttemptAt,
        ],
      );
      return (result.rows as unknown[]).length > 0;
    },

    /** Ends a pending delivery without an attempt (its subscription is gone or inactive). */
    async abandon(id: string, expected: number, error: string, now: Date): Promise<void> {
      await deliveries()
        .where({ id, attempts: expected, status: 'pending' })
        .update({ status: 'failed', last_error: error, next_attempt_at: null, lease_until: 0, updated_at: now } as never);
    },

    async list(webhookId: string, page: Page, status?: DeliveryStatus): Promise<{ rows: DeliveryRow[]; total: number }> {
      const base = () => {
        const q = deliveries().where({ webhook_id: webhookId });
        return status ? q.andWhere({ status }) : q;
      };
      const [{ count }] = (await base().count<{ count: number }[]>({ count: '*' })) as { count: number }[];
      const rows = await base().select('*').orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).limit(page.limit).offset(page.offset);
      return { rows: rows as DeliveryRow[], total: Number(count) };
    },

    async get(webhookId: string, id: string): Promise<DeliveryRow | undefined> {
      return (await deliveries().where({ id, webhook_id: webhookId }).first()) as DeliveryRow | undefined;
    },

    async attemptsOf(ids: string[]): Promise<AttemptRow[]> {
      if (ids.length === 0) return [];
      return (await knex<AttemptRow>('webhook_delivery_attempts').whereIn('delivery_id', ids).orderBy([{ column: 'delivery_id' }, { column: 'attempt' }])) as AttemptRow[];
    },

    /** A finished delivery starts a new run of the schedule; false when it is still pending. */
    async reopen(webhookId: string, id: string, now: Date): Promise<DeliveryRow | undefined> {
      const [row] = await deliveries()
        .where({ id, webhook_id: webhookId })
        .whereNot({ status: 'pending' })
        .update({ status: 'pending', cycle_attempts: 0, lease_until: 0, next_attempt_at: now, swept_at: null, sweeps: 0, resweep_after: null, delivered_at: null, updated_at: now } as never)
        .returning('*');
      return row as DeliveryRow | undefined;
    },

    /**
     * Deletes ended deliveries (delivered, failed, dead) last changed before `before`, with their
     * attempts (cascade), at most `batch` per statement; returns how many. A pending one is never
     * deleted, however old.
     */
    async pruneEnded(before: Date, batch = 1000): Promise<number> {
      let total = 0;
      for (;;) {
        const n = await pruneEndedStatement(knex, before, batch);
        total += n;
        if (n < batch) return total;
      }
    },

    /**
     * Pending deliveries whose next attempt is overdue by `graceMs` at `now` (their job may have been
     * lost), and not re-enqueued by a sweep within the last `graceMs × 2^(sweeps - 1)` (`sweeps` capped
     * at SWEEP_BACKOFF_STEPS): a delivery that waits because its receiver is slow, its job alive on the
     * bus, gets a duplicate job after 1, 2, 4 … grace periods rather than one per grace period.
     * Both conditions are one indexed comparison on `sweep_due_at` (`touch` stores the back-off in
     * it), so the oldest `limit` due rows come straight from the partial index and rows still backing
     * off are never read: the cost does not grow with a slow receiver's backlog.
     */
    async overdue(now: Date, graceMs: number, limit: number): Promise<Pick<DeliveryRow, 'id' | 'attempts'>[]> {
      const before = new Date(now.getTime() - graceMs);
      return deliveries().where({ status: 'pending' }).andWhere('sweep_due_at', '<', before).orderBy('sweep_due_at').limit(limit).select('id', 'attempts');
    },

    /** Attempts recorded since `since`, by outcome (metrics). */
    async attemptsSince(since: Date): Promise<Partial<Record<AttemptOutcome, number>>> {
      const rows = (await knex('webhook_delivery_attempts').where('attempted_at', '>=', since).select('outcome').count({ n: '*' }).groupBy('outcome')) as { outcome: AttemptOutcome; n: number | string }[];
      return Object.fromEntries(rows.map((r) => [r.outcome, Number(r.n)]));
    },

    /** Pending deliveries, and the attempt time of the oldest one already due (metrics). */
    async backlog(now: Date): Promise<{ pending: number; oldestDue: Date | null }> {
      const row = (await deliveries()
        .where({ status: 'pending' })
        .first(knex.raw('count(*) as pending'), knex.raw('min(next_attempt_at) filter (where next_attempt_at <= ?) as oldest_due', [now]))) as
        | { pending: number | string; oldest_due: Date | string | null }
        | undefined;
      return { pending: Number(row?.pending ?? 0), oldestDue: row?.oldest_due ? new Date(row.oldest_due) : null };
    },

    /**
     * Marks swept deliveries as just re-enqueued (`swept_at`, `sweeps`), so the next sweep waits
     * (see `overdue`): `resweep_after` becomes `now + graceMs × (2^(sweeps - 1) - 1)` (`sweeps` the new
     * count, capped at SWEEP_BACKOFF_STEPS), so the row is overdue again `graceMs × 2^(sweeps - 1)`
     * after `now`, one grace period past it as an unswept row is past `next_attempt_at`.
     * `next_attempt_at` stays the time the attempt was due: the lag metric and the admin API keep
     * counting from it, and an attempt recorded while the sweep ran keeps the time of its next
     * attempt (the sweep never makes that one early). Only rows still pending with the attempt count
     * the sweep read are marked.
     */
    async touch(swept: Pick<DeliveryRow, 'id' | 'attempts'>[], now: Date, graceMs: number): Promise<void> {
      for (let i = 0; i < swept.length; i += STATEMENT_ROWS) {
        const batch = swept.slice(i, i + STATEMENT_ROWS);
        await deliveries()
          .where({ status: 'pending' })
          .andWhere((q) => {
            for (const d of batch) q.orWhere({ id: d.id, attempts: d.attempts });
          })
          .update({
            swept_at: now,
            sweeps: knex.raw('sweeps + 1'),
            // `sweeps` here is the count before this sweep.
            resweep_after: knex.raw(`?::timestamptz + (?::double precision * (power(2, least(sweeps + 1, ?) - 1) - 1)) * interval '1 millisecond'`, [now, graceMs, SWEEP_BACKOFF_STEPS]),
            queued: true,
          } as never);
      }
    },
  };
}

export type DeliveriesStore = ReturnType<typeof createDeliveriesStore>;
