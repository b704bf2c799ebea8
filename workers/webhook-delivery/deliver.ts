import type { BusMessage, Clock, Delivery, EgressGuard, Logger, SecretBox } from '../../services/kit/index.js';
import { ATTEMPT_HEADER, HeaderValueUnopenable, openHeaders, PARKED_FOR_HEADER, PARKED_HEADER, type AttemptOutcome, type DeliveriesStore, type DeliveryJob, type DeliveryRow, type WebhookRow } from '../../domains/webhooks/index.js';
import { attemptDelivery } from './attempt.js';

/**
 * The delivery consumer: one job = one attempt. A job carries the number of attempts the delivery
 * had when it was scheduled; the attempt is claimed with a compare-and-set on that number (plus a
 * lease while the POST is in flight), recorded, and only then is the job acked or re-scheduled
 * with `retryAfter` (a TTL queue per delay step on RabbitMQ, `run_at` on the PostgreSQL queue).
 * A worker that dies anywhere in between leaves the job unacked: the broker hands it out again.
 */
export interface DeliverDeps {
  deliveries: DeliveriesStore;
  box: SecretBox;
  guard: EgressGuard;
  clock: Clock;
  logger: Logger;
  /** Delays before attempt 2, 3, … (ms). Attempts in one run: schedule.length + 1. */
  schedule: number[];
  timeoutMs: number;
  concurrencyPerSubscription: number;
  /** Delivery jobs the worker holds at once (WEBHOOK_PREFETCH): the window the subscriptions share. */
  prefetch: number;
  busyDelayMs: number;
  /** Picks a parked job's wait among two steps (tests pin it); Math.random by default. */
  random?: () => number;
}

/** A job parked again and again waits at most 2^this × WEBHOOK_BUSY_DELAY_MS (32×). */
export const PARK_BACKOFF_STEPS = 5;

/**
 * How long a job waits on the bus when it is parked for the `parked + 1`-th time in a row: the n-th
 * park of a job waits busyDelayMs × 2^min(n - 1, PARK_BACKOFF_STEPS), or, from the second on, at
 * random half of that (jitter, so a backlog parked together does not come back together). The waits
 * stay within busyDelayMs × 2^0..2^PARK_BACKOFF_STEPS: RabbitMQ keeps one TTL queue per delay value.
 */
export function parkDelayMs(busyDelayMs: number, parked: number, random: () => number): number {
  const step = Math.min(Math.max(0, parked), PARK_BACKOFF_STEPS);
  const jittered = step > 0 && random() < 0.5 ? step - 1 : step;
  return busyDelayMs * 2 ** jittered;
}

/**
 * How many of the prefetch window's slots are kept from subscriptions that already hold a job:
 * while the jobs held reach `prefetch - reserve`, only a subscription holding none may take one.
 */
function reservedSlots(prefetch: number): number {
  return Math.max(1, Math.ceil(prefetch / 4));
}

export function createDeliveryHandler(deps: DeliverDeps) {
  // Per subscription: attempts in flight (at most `limit`), and jobs waiting here for a slot (at
  // most `limit` more). Every such job holds one of the worker's `prefetch` slots until its attempt
  // ends, which a hanging receiver makes as long as WEBHOOK_TIMEOUT_MS. So that hanging receivers
  // can never fill the window, the last `reserve` slots go only to subscriptions that hold no job:
  // a subscription's first job always runs, any other job is parked on the bus for
  // WEBHOOK_BUSY_DELAY_MS, longer each time in a row (`parkDelayMs`; acked at once, so its slot is
  // free again) once the jobs held reach
  // `prefetch - reserve`, or when its subscription is at its own bounds.
  const limit = deps.concurrencyPerSubscription;
  const shared = Math.max(0, deps.prefetch - reservedSlots(deps.prefetch));
  let held = 0;
  const gates = new Map<string, { active: number; queue: Array<() => void> }>();
  async function acquire(webhookId: string): Promise<boolean> {
    let g = gates.get(webhookId);
    if (!g) gates.set(webhookId, (g = { active: 0, queue: [] }));
    if (g.active === 0) {
      g.active++;
      held++;
      return true;
    }
    if (held >= shared) return false;
    held++;
    if (g.active < limit) {
      g.active++;
      return true;
    }
    if (g.queue.length >= limit) {
      held--;
      return false;
    }
    await new Promise<void>((resolve) => g.queue.push(resolve));
    return true; // the slot was handed over by releaseSlot
  }
  function releaseSlot(webhookId: string): void {
    const g = gates.get(webhookId);
    if (!g) return;
    held--;
    const next = g.queue.shift();
    if (next) return next();
    g.active--;
    if (g.active === 0) gates.delete(webhookId);
  }
  const leaseMs = deps.timeoutMs + 2000;
  const random = deps.random ?? Math.random;
  const parkSteps = Array.from({ length: PARK_BACKOFF_STEPS + 1 }, (_, i) => deps.busyDelayMs * 2 ** i);
  // Delays handed to retryAfter come from this fixed set (one TTL queue each on RabbitMQ).
  const steps = [...new Set([...deps.schedule, ...parkSteps, leaseMs])].sort((a, b) => a - b);
  // Any re-schedule but a park starts the job's park count again.
  const next = (attempts: number) => ({ [ATTEMPT_HEADER]: String(attempts), [PARKED_HEADER]: '0', [PARKED_FOR_HEADER]: '' });
  const roundUp = (ms: number) => (ms <= 0 ? 0 : steps.find((s) => s >= ms) ?? steps[steps.length - 1]!);

  function secretsOf(webhook: WebhookRow, nowMs: number): { current: string; previous?: string } {
    const current = deps.box.open(webhook.secret_sealed, webhook.id);
    const graceUntil = webhook.previous_secret_expires_at ? new Date(webhook.previous_secret_expires_at).getTime() : 0;
    if (webhook.previous_secret_sealed && graceUntil > nowMs) return { current, previous: deps.box.open(webhook.previous_secret_sealed, webhook.id) };
    return { current };
  }

  /** A job whose attempt was already recorded. */
  async function stale(message: BusMessage<DeliveryJob>, delivery: Delivery, row: DeliveryRow): Promise<void> {
    // Redelivered (a worker died after recording but before re-scheduling): the next job may never
    // have been sent, so schedule it; a duplicate is harmless (the compare-and-set drops it).
    if (message.redelivered && row.status === 'pending') {
      const due = row.next_attempt_at ? new Date(row.next_attempt_at).getTime() - deps.clock.now() : 0;
      return delivery.retryAfter(roundUp(due), next(row.attempts));
    }
    return delivery.ack();
  }

  /**
   * Parked on the bus: each park in a row waits longer (jittered, capped), so a long backlog behind
   * one slow subscriber is looked at less and less often. Jobs from before the count existed count
   * 0. The job names its subscription, so that when it comes back it looks for a slot first.
   */
  function park(message: BusMessage<DeliveryJob>, delivery: Delivery, expected: number, webhookId: string): Promise<void> {
    const parked = Number.parseInt(message.headers[PARKED_HEADER] ?? '0', 10);
    const times = Number.isInteger(parked) && parked > 0 ? parked : 0;
    return delivery.retryAfter(parkDelayMs(deps.busyDelayMs, times, random), { [ATTEMPT_HEADER]: String(expected), [PARKED_HEADER]: String(times + 1), [PARKED_FOR_HEADER]: webhookId });
  }

  return async function handle(message: BusMessage<DeliveryJob>, delivery: Delivery): Promise<void> {
    const id = message.body?.delivery_id;
    const expected = Number(message.headers[ATTEMPT_HEADER] ?? '0');
    if (typeof id !== 'string' || !Number.isInteger(expected)) return delivery.deadLetter();
    // A job back from a park: nothing it would read can let it in while its subscription is still
    // at its bounds, so the slot is looked for first and the job parked again without a read. Once
    // in, it reads and checks everything as any job does (a subscription deactivated or deleted
    // while it was parked included).
    const parkedFor = message.headers[PARKED_FOR_HEADER];
    if (!parkedFor) return attempt(message, delivery, id, expected, undefined);
    if (!(await acquire(parkedFor))) return park(message, delivery, expected, parkedFor);
    const slot = { webhookId: parkedFor, taken: false };
    try {
      return await attempt(message, delivery, id, expected, slot);
    } finally {
      if (!slot.taken) releaseSlot(parkedFor);
    }
  };

  /** `slot`: the subscription slot a job back from a park already holds (`taken` once the attempt owns it). */
  async function attempt(message: BusMessage<DeliveryJob>, delivery: Delivery, id: string, expected: number, slot: { webhookId: string; taken: boolean } | undefined): Promise<void> {
    const found = await deps.deliveries.withWebhook(id);
    if (!found) return delivery.ack(); // its subscription was deleted (cascade)
    let { delivery: row, webhook } = found;
    if (row.status !== 'pending' || row.attempts > expected) return stale(message, delivery, row);
    if (row.attempts < expected) return delivery.ack(); // cannot happen unless the row was rewritten; nothing to do
    if (!webhook || !webhook.active) {
      await deps.deliveries.abandon(id, expected, webhook ? 'webhook is inactive' : 'webhook was deleted', new Date(deps.clock.now()));
      return delivery.ack();
    }
    const subscription = webhook;
    try {
      secretsOf(subscription, deps.clock.now());
    } catch {
      // Sealed under another MASTER_KEY: no attempt can be signed; retrying would not help.
      deps.logger.error({ webhook_id: subscription.id }, 'webhook secret cannot be opened (was MASTER_KEY changed?)');
      await deps.deliveries.abandon(id, expected, 'webhook secret cannot be opened with this MASTER_KEY; rotate the secret', new Date(deps.clock.now()));
      return delivery.ack();
    }
    try {
      openHeaders(deps.box, subscription);
    } catch (error) {
      // Only a value in the sealed format can fail (any other is clear, written by older code): it
      // was sealed under another MASTER_KEY, or altered. The receiver would not get what was
      // registered (its token…), and retrying would not help: ended as a secret that does not open is.
      const header = error instanceof HeaderValueUnopenable ? error.header : undefined;
      deps.logger.error({ webhook_id: subscription.id, header }, 'a webhook header value is sealed but does not open (was MASTER_KEY changed?)');
      const reason = `webhook header ${header ?? 'value'} is sealed but does not open with this MASTER_KEY (sealed under another key, or altered); set the headers again`;
      await deps.deliveries.abandon(id, expected, reason, new Date(deps.clock.now()));
      return delivery.ack();
    }

    // Bounded concurrency per subscription: a slow receiver never holds every slot of the worker.
    let gate: boolean;
    if (slot?.webhookId === subscription.id) gate = slot.taken = true;
    else {
      // A header naming another subscription (not one this code wrote): its slot is given back.
      if (slot && !slot.taken) {
        slot.taken = true;
        releaseSlot(slot.webhookId);
      }
      gate = await acquire(subscription.id);
    }
    if (!gate) return park(message, delivery, expected, subscription.id);
    const release = () => releaseSlot(subscription.id);

    const nowMs = deps.clock.now();
    let result;
    try {
      // The claim reads the delivery and its subscription as they are now (a wait for a slot may have taken a while).
      const claimed = await deps.deliveries.claim(id, expected, leaseMs);
      if (!claimed) {
        const again = await deps.deliveries.withWebhook(id);
        if (!again || again.delivery.status !== 'pending' || again.delivery.attempts !== expected) return again ? stale(message, delivery, again.delivery) : delivery.ack();
        // Another copy of this job is making the attempt (or died making it): look again after its lease.
        return delivery.retryAfter(roundUp(leaseMs), next(expected));
      }
      row = claimed.delivery;
      if (!claimed.webhook?.active) {
        // Deactivated while this job waited for its slot (or since it was read): no attempt.
        await deps.deliveries.abandon(id, expected, claimed.webhook ? 'webhook is inactive' : 'webhook was deleted', new Date(deps.clock.now()));
        return delivery.ack();
      }
      webhook = claimed.webhook;
      result = await attemptDelivery({ guard: deps.guard, delivery: row, webhook, headers: openHeaders(deps.box, webhook), secrets: secretsOf(webhook, nowMs), nowMs, timeoutMs: deps.timeoutMs });
    } finally {
      release();
    }

    const attemptedAt = deps.clock.now();
    const cycleAttempt = row.cycle_attempts + 1; // 1-based within this run of the schedule
    let outcome: AttemptOutcome = result.verdict;
    let delay: number | undefined;
    if (result.verdict === 'retry') {
      delay = deps.schedule[cycleAttempt - 1];
      if (delay === undefined) outcome = 'dead';
    }
    const recorded = await deps.deliveries.record({
      deliveryId: id,
      expectedAttempts: expected,
      retryCount: row.attempts,
      statusCode: result.statusCode,
      durationMs: result.durationMs,
      outcome,
      error: result.error,
      responseHead: result.responseHead,
      attemptedAt: new Date(attemptedAt),
      nextAttemptAt: outcome === 'retry' ? new Date(attemptedAt + delay!) : null,
    });
    if (!recorded) return delivery.ack(); // another copy recorded this attempt first
    if (outcome !== 'delivered') {
      // Never the URL (it may embed a token) nor a secret: ids, status and the verdict's reason.
      const fields = {
        webhook_id: webhook.id,
        delivery_id: id,
        event_id: row.event_id,
        event_type: row.event_type,
        attempt: expected + 1,
        status: result.statusCode,
        error: result.error,
        outcome,
        ...(outcome === 'retry' ? { next_attempt_in_ms: delay } : {}),
      };
      const message =
        outcome === 'dead'
          ? 'webhook delivery is dead after its last attempt'
          : outcome === 'failed'
            ? 'webhook delivery failed and will not be retried'
            : 'webhook delivery attempt failed; will retry';
      deps.logger.warn(fields, message);
    }
    if (outcome === 'retry') return delivery.retryAfter(delay!, next(expected + 1));
    return delivery.ack();
  }
}
