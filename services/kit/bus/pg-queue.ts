import { EventEmitter } from 'node:events';
import type { Knex } from 'knex';
import type { Clock } from '../clock.js';
import { idleBackoff, type IdleBackoff } from '../db/idle-backoff.js';
import type { Logger } from '../logger.js';
import { afterHandlerFailure, busExchangeName, HANDLER_FAILURES_HEADER, retryHeaders, topicMatches, type Bus, type BusMessage, type ConsumeOptions, type Consumer, type Delivery, type MessageHandler, type PublishOptions, type QueueBacklog } from './types.js';

/**
 * Embedded driver: a durable PostgreSQL-backed queue (works on PGlite and on PostgreSQL).
 * Topic bindings live in `bus_bindings`; a publish inserts one job per bound queue. Consumers
 * claim jobs with `FOR UPDATE SKIP LOCKED` in a single autocommit statement (never a transaction
 * held open, which PGlite's one connection could not afford) and hold them under a lease: a
 * consumer that dies before ack loses the lease and the job is claimed again; while a handler runs
 * (up to `maxHoldMs`), its lease is renewed, so a slow handler's job is not handed to a second
 * consumer while the first still works on it. `run_at` carries
 * delays. A consumer claims at once when woken (a publish or send in this process, a finished job);
 * otherwise one shared look per `pollMs` (a read of which of this bus's queues have ready jobs)
 * tells the idle consumers whether to claim, instead of one claiming update per consumer per period
 * — on the embedded default that was most of an idle platform's CPU. When this bus is the only
 * writer of its queues (`idlePollMaxMs`), the look backs off while it finds nothing and comes early
 * for the delayed jobs this bus wrote. Emits `poll` each time a consumer looked for work (a claim,
 * or the shared look finding none for it) so tests can wait on polls instead of time, and `look`
 * with the wait before each shared look.
 */

export interface PgQueueBusOptions {
  knex: Knex;
  /** Base name of the emulated topic exchange; bindings are kept under `${queuePrefix}${exchange}`. */
  exchange: string;
  /** Prefix of every queue and of the exchange: buses with different prefixes share nothing. */
  queuePrefix?: string;
  prefetch?: number;
  pollMs?: number;
  /**
   * Set where nothing but this bus writes its queues (the embedded database, which one process
   * owns): a job ready now then always announces itself (a publish or send here wakes its
   * consumer), and the shared look only has to find jobs whose time came later. Each look that finds
   * nothing doubles the wait before the next, from `pollMs` up to this; a look that finds work
   * brings it back to `pollMs`, and a delayed job written here is looked for when it is due. Unset
   * (other processes write the queues): one look per `pollMs`.
   */
  idlePollMaxMs?: number;
  /** How long a claimed job stays invisible to other consumers before it is offered again (60 s). */
  leaseMs?: number;
  /**
   * How long a running handler keeps its job leased (renewed every third of `leaseMs`): past this
   * (30 min, RabbitMQ's default consumer timeout) the lease runs out and the job is offered again,
   * so a handler that hangs does not hold its job for ever.
   */
  maxHoldMs?: number;
  handlerErrorDelayMs?: number;
  /**
   * How long a dead-lettered job is kept for inspection (14 days; 0 = for ever). The older dead jobs
   * of a queue are deleted when it dead-letters another, so the dead letters stay bounded by what
   * one period dead-letters without a timer of their own.
   */
  deadRetentionMs?: number;
  clock: Clock;
  logger: Logger;
}

interface JobRow {
  id: number;
  queue: string;
  message_id: string;
  routing_key: string;
  body: unknown;
  headers: Record<string, string>;
  deliveries: number;
  locked_until: number | string;
}

export class PgQueueBus extends EventEmitter implements Bus {
  readonly driver = 'pg' as const;
  private closed = false;
  private readonly wakers = new Map<string, Set<() => void>>();
  private readonly pollers = new Set<{ stop(): void; done: Promise<void> }>();
  /** The next shared look for ready jobs, while one is scheduled, and its timer. */
  private look: Promise<Set<string> | null> | undefined;
  private lookTimer: NodeJS.Timeout | undefined;
  private endLook: (() => void) | undefined;
  /** When the scheduled look fires, on `performance.now()`'s time line. */
  private lookFiresAt = 0;
  /** The wait before the next look while idle (`idlePollMaxMs`). */
  private readonly idleWait: IdleBackoff;
  /** When the delayed jobs this bus wrote become due (its clock), soonest first; bounded, the rest wait for the backoff. */
  private readonly dueTimes: number[] = [];

  private readonly exchange: string;
  /** Set while claims fail (the database away): the failure is logged once, and its end. */
  private pollFailing = false;

  constructor(private readonly options: PgQueueBusOptions) {
    super();
    this.exchange = busExchangeName(options.queuePrefix, options.exchange);
    this.idleWait = idleBackoff(this.pollMs, options.idlePollMaxMs);
  }

  private get pollMs(): number {
    return this.options.pollMs ?? 250;
  }

  private q(name: string): string {
    return `${this.options.queuePrefix ?? ''}${name}`;
  }

  async publish(routingKey: string, body: unknown, options: PublishOptions): Promise<void> {
    this.assertOpen();
    const { knex } = this.options;
    const exchange = this.exchange;
    const bindings: { queue: string; pattern: string }[] = await knex('bus_bindings').select('queue', 'pattern').where({ exchange });
    const queues = new Set(bindings.filter((b) => topicMatches(b.pattern, routingKey)).map((b) => b.queue));
    if (queues.size === 0) return;
    const now = this.options.clock.now();
    await knex('bus_jobs').insert(
      [...queues].map((queue) => this.row(queue, routingKey, body, options, now)),
    );
    for (const queue of queues) this.wake(queue);
  }

  async send(queue: string, body: unknown, options: PublishOptions & { delayMs?: number; routingKey?: string }): Promise<void> {
    this.assertOpen();
    const target = this.q(queue);
    const runAt = this.options.clock.now() + Math.max(0, options.delayMs ?? 0);
    await this.options.knex('bus_jobs').insert(this.row(target, options.routingKey ?? queue, body, options, runAt));
    if (options.delayMs) this.expectDue(runAt);
    else this.wake(target);
  }

  private row(queue: string, routingKey: string, body: unknown, options: PublishOptions, runAt: number) {
    return {
      queue,
      message_id: options.messageId,
      routing_key: routingKey,
      body: JSON.stringify(body),
      headers: JSON.stringify(options.headers ?? {}),
      run_at: runAt,
    };
  }

  async declare(options: Omit<ConsumeOptions, 'prefetch'>): Promise<void> {
    this.assertOpen();
    const queue = this.q(options.queue);
    const exchange = this.exchange;
    // A queue is its jobs: it exists as soon as a binding makes a publish write jobs for it.
    for (const pattern of options.bindings ?? []) {
      await this.options.knex('bus_bindings').insert({ exchange, queue, pattern }).onConflict(['exchange', 'queue', 'pattern']).ignore();
    }
  }

  async consume<T>(options: ConsumeOptions, handler: MessageHandler<T>): Promise<Consumer> {
    if (options.transient) throw new Error('the PostgreSQL-backed queue has no transient queues (RabbitMQ only)');
    await this.declare(options);
    const queue = this.q(options.queue);
    const prefetch = options.prefetch ?? this.options.prefetch ?? 32;
    let stopped = false;
    let inFlight = 0;
    /** The handlers running now, for a draining cancel. */
    const running = new Set<Promise<void>>();
    let wakeUp: (() => void) | undefined;
    // Set by every wake, so one that comes while the consumer is between two waits is not lost.
    let wakeRequested = false;
    const waker = () => {
      wakeRequested = true;
      wakeUp?.();
    };
    this.wakerSet(queue).add(waker);

    const loop = async () => {
      while (!stopped && !this.closed) {
        await yieldToEventLoop();
        wakeRequested = false;
        let claimed: JobRow[] = [];
        try {
          if (inFlight < prefetch) {
            claimed = await this.claim(queue, prefetch - inFlight);
            this.pollSucceeded();
          }
        } catch (error) {
          this.pollFailed(error as Error, queue);
        }
        this.emit('poll', { queue, claimed: claimed.length });
        for (const job of claimed) {
          inFlight++;
          const dispatched = this.dispatch(queue, job, handler as MessageHandler).finally(() => {
            inFlight--;
            running.delete(dispatched);
            waker();
          });
          running.add(dispatched);
        }
        if (claimed.length > 0 && inFlight < prefetch) continue;
        // Idle (or full): wait to be woken, or for a shared look that finds work for this queue.
        while (!wakeRequested) {
          const woken = new Promise<'woken'>((resolve) => (wakeUp = () => resolve('woken')));
          const outcome = await Promise.race([woken, this.nextLook()]);
          wakeUp = undefined;
          if (outcome === 'woken' || wakeRequested || stopped || this.closed) break;
          // A failed look (null) claims anyway: the claim reports the failure, as every poll did.
          if (outcome === null || (outcome.has(queue) && inFlight < prefetch)) break;
          this.emit('poll', { queue, claimed: 0 });
        }
      }
    };
    const poller = {
      stop: () => {
        stopped = true;
        waker();
      },
      done: loop(),
    };
    this.pollers.add(poller);
    return {
      // With `drainMs`, the handlers running now get up to that long to settle before this resolves
      // (a graceful stop that then closes the bus or what its handlers use would drop their outcome).
      cancel: async (cancelOptions) => {
        poller.stop();
        this.wakerSet(queue).delete(waker);
        this.pollers.delete(poller);
        await poller.done;
        const drainMs = cancelOptions?.drainMs ?? 0;
        if (drainMs > 0 && running.size > 0) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([Promise.allSettled([...running]), new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
          clearTimeout(timer);
        }
      },
    };
  }

  /** One warning per outage, not one per consumer per poll while the database is away. */
  private pollFailed(error: Error, queue: string): void {
    if (this.closed || this.pollFailing) return;
    this.pollFailing = true;
    this.options.logger.warn({ err: error.message, queue }, 'bus poll failed; consumers keep polling, and its recovery is logged');
  }

  private pollSucceeded(): void {
    if (!this.pollFailing) return;
    this.pollFailing = false;
    this.options.logger.info('bus poll recovered');
  }

  /**
   * The queues (of those with a consumer here, i.e. a waker) holding jobs ready to claim, read once per `pollMs` for
   * every idle consumer together; null when the read failed.
   */
  private nextLook(): Promise<Set<string> | null> {
    this.look ??= new Promise<void>((resolve) => {
      this.endLook = resolve;
      this.scheduleLook(this.waitBeforeLook());
    }).then(async () => {
      this.lookTimer = undefined;
      this.endLook = undefined;
      try {
        const consumed = [...this.wakers].filter(([, wakers]) => wakers.size > 0).map(([queue]) => queue);
        if (this.closed || consumed.length === 0) return new Set<string>();
        const now = this.options.clock.now();
        while (this.dueTimes.length > 0 && this.dueTimes[0]! <= now) this.dueTimes.shift();
        const rows: Array<{ queue: string }> = await this.options
          .knex('bus_jobs')
          .distinct('queue')
          .whereIn('queue', consumed)
          .andWhere('state', 'ready')
          .andWhere('run_at', '<=', now)
          .andWhere('locked_until', '<', now);
        this.idleWait.polled(rows.length > 0);
        return new Set(rows.map((r) => r.queue));
      } catch {
        return null;
      } finally {
        this.look = undefined;
      }
    });
    return this.look;
  }

  /** `pollMs`, or what it backed off to while idle (`idlePollMaxMs`), shortened to the first delayed job due. */
  private waitBeforeLook(): number {
    const due = this.dueTimes[0];
    const waitMs = this.idleWait.waitMs;
    return due === undefined ? waitMs : Math.min(waitMs, Math.max(0, due - this.options.clock.now()));
  }

  private scheduleLook(waitMs: number): void {
    clearTimeout(this.lookTimer);
    this.lookTimer = setTimeout(this.endLook!, waitMs);
    this.lookFiresAt = performance.now() + waitMs;
    this.emit('look', { waitMs });
  }

  /** A delayed job written here is due at `runAt`: with `idlePollMaxMs`, the look comes for it then. */
  private expectDue(runAt: number): void {
    if (this.options.idlePollMaxMs === undefined) return;
    if (this.dueTimes.length >= MAX_DUE_TIMES && runAt >= this.dueTimes[this.dueTimes.length - 1]!) return;
    let at = this.dueTimes.length;
    while (at > 0 && this.dueTimes[at - 1]! > runAt) at--;
    this.dueTimes.splice(at, 0, runAt);
    if (this.dueTimes.length > MAX_DUE_TIMES) this.dueTimes.pop();
    // A look already waiting longer than this job needs is brought forward.
    const waitMs = Math.max(0, runAt - this.options.clock.now());
    if (this.endLook && performance.now() + waitMs < this.lookFiresAt) this.scheduleLook(waitMs);
  }

  private get leaseMs(): number {
    return this.options.leaseMs ?? 60_000;
  }

  private async claim(queue: string, limit: number): Promise<JobRow[]> {
    const now = this.options.clock.now();
    const lease = now + this.leaseMs;
    const { knex } = this.options;
    const result = await knex.raw(
      `update bus_jobs set locked_until = ?, deliveries = deliveries + 1
         where id in (
           select id from bus_jobs
            where queue = ? and state = 'ready' and run_at <= ? and locked_until < ?
            order by run_at, id
            limit ?
            for update skip locked)
       returning id, queue, message_id, routing_key, body, headers, deliveries, locked_until`,
      [lease, queue, now, now, limit],
    );
    const rows = (result.rows ?? []) as JobRow[];
    return rows.sort((a, b) => a.id - b.id);
  }

  private async dispatch(queue: string, job: JobRow, handler: MessageHandler): Promise<void> {
    const { knex } = this.options;
    let settled = false;
    const renewal = this.renewLease(queue, job, () => settled);
    const settle = async (action: () => Promise<unknown>) => {
      // After close() this node is "dead": its outcome never reaches the store, the lease expires.
      if (settled || this.closed) return;
      settled = true;
      renewal.stop();
      await action();
    };
    const delivery: Delivery = {
      ack: () => settle(() => knex('bus_jobs').where({ id: job.id }).delete()),
      // `run_at` of a dead job is when it died: what its retention counts from.
      deadLetter: () =>
        settle(async () => {
          const now = this.options.clock.now();
          // The expired dead letters go first: once this one shows as dead, they are gone.
          const retentionMs = this.options.deadRetentionMs ?? DEFAULT_DEAD_RETENTION_MS;
          if (retentionMs > 0) await knex('bus_jobs').where({ queue, state: 'dead' }).andWhere('run_at', '<', now - retentionMs).delete();
          await knex('bus_jobs').where({ id: job.id }).update({ state: 'dead', locked_until: 0, run_at: now });
        }),
      retryAfter: (delayMs, extra) =>
        settle(async () => {
          const runAt = this.options.clock.now() + Math.max(0, delayMs);
          await knex('bus_jobs')
            .where({ id: job.id })
            .update({
              run_at: runAt,
              locked_until: 0,
              // A retry is a new hand-out, as on RabbitMQ (where it is a new message): not "redelivered".
              deliveries: 0,
              headers: JSON.stringify(retryHeaders(job.headers ?? {}, extra)),
            });
          this.expectDue(runAt);
        }),
    };
    await yieldToEventLoop();
    const message: BusMessage = {
      id: job.message_id,
      routingKey: job.routing_key,
      body: job.body,
      headers: job.headers ?? {},
      redelivered: job.deliveries > 1,
    };
    try {
      await handler(message, delivery);
      // A handler that returned without settling its job leaves it to its lease, as before.
      renewal.stop();
    } catch (error) {
      renewal.stop();
      const { failures, deadLetter } = afterHandlerFailure(message.headers, error);
      if (deadLetter) {
        this.options.logger.error({ err: (error as Error)?.message, queue, message_id: message.id, failures }, 'message handler keeps failing; moved to dead letters');
        await delivery.deadLetter().catch((settleError: Error) => this.options.logger.warn({ err: settleError.message, queue }, 'bus settle failed; the job is offered again when its lease ends'));
        return;
      }
      this.options.logger.error({ err: (error as Error)?.message, queue, failures }, 'message handler failed; retrying later');
      await delivery
        .retryAfter(this.options.handlerErrorDelayMs ?? 5000, { [HANDLER_FAILURES_HEADER]: String(failures) })
        .catch((settleError: Error) => this.options.logger.warn({ err: settleError.message, queue }, 'bus settle failed; the job is offered again when its lease ends'));
    }
  }

  /**
   * Keeps a claimed job's lease while its handler runs: every third of `leaseMs` the lease is moved
   * on, if it is still the one this consumer holds (a compare-and-set, so a settle that already
   * released it wins), until the handler settles, the bus closes, or `maxHoldMs` has passed.
   */
  private renewLease(queue: string, job: JobRow, settled: () => boolean): { stop(): void } {
    let lease = Number(job.locked_until);
    const until = performance.now() + (this.options.maxHoldMs ?? 30 * 60_000);
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const stop = () => {
      stopped = true;
      clearInterval(timer);
    };
    let renewing = false;
    timer = setInterval(() => {
      if (stopped || settled() || this.closed) return stop();
      if (performance.now() >= until) {
        this.options.logger.warn({ queue, message_id: job.message_id }, 'bus handler still running past its longest hold; its job will be offered again');
        return stop();
      }
      if (renewing) return;
      renewing = true;
      const next = this.options.clock.now() + this.leaseMs;
      this.options
        .knex('bus_jobs')
        .where({ id: job.id, locked_until: lease, state: 'ready' })
        .update({ locked_until: next })
        .then((updated: number) => {
          if (updated > 0) lease = next;
          else stop(); // settled, or no longer ours
        })
        .catch((error: Error) => this.options.logger.warn({ err: error.message, queue }, 'bus lease renewal failed; will try again'))
        .finally(() => (renewing = false));
    }, Math.max(1, Math.floor(this.leaseMs / 3)));
    timer.unref();
    return { stop };
  }

  private wakerSet(queue: string): Set<() => void> {
    let set = this.wakers.get(queue);
    if (!set) this.wakers.set(queue, (set = new Set()));
    return set;
  }

  private wake(queue: string): void {
    for (const waker of this.wakers.get(queue) ?? []) waker();
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('bus is closed');
  }

  async ping(): Promise<void> {
    await this.options.knex.raw('select 1 from bus_jobs limit 1');
  }

  /** No connection of its own to lose (a publish fails only with the database): never called. */
  onReconnect(_listener: () => void): () => void {
    return () => {};
  }

  async backlog(): Promise<QueueBacklog[]> {
    const prefix = this.options.queuePrefix ?? '';
    const now = this.options.clock.now();
    const due = `state = 'ready' and run_at <= ? and locked_until < ?`;
    const rows: Array<{ queue: string; ready: string | number; oldest: string | number | null; dead: string | number }> = await this.options
      .knex('bus_jobs')
      .select('queue')
      .select(this.options.knex.raw(`count(*) filter (where ${due}) as ready`, [now, now]))
      .select(this.options.knex.raw(`min(run_at) filter (where ${due}) as oldest`, [now, now]))
      .select(this.options.knex.raw(`count(*) filter (where state = 'dead') as dead`))
      .whereRaw('left(queue, ?) = ?', [prefix.length, prefix])
      .groupBy('queue');
    return rows
      .filter((r) => Number(r.ready) > 0 || Number(r.dead) > 0)
      .map((r) => ({
        queue: r.queue.slice(prefix.length),
        ready: Number(r.ready),
        oldestSeconds: r.oldest === null ? null : Math.max(0, (now - Number(r.oldest)) / 1000),
        dead: Number(r.dead),
      }));
  }

  async close(): Promise<void> {
    this.closed = true;
    const pollers = [...this.pollers];
    for (const p of pollers) p.stop();
    await Promise.all(pollers.map((p) => p.done));
    // A look still scheduled ends now (it reads nothing once closed) rather than at its timer.
    clearTimeout(this.lookTimer);
    this.endLook?.();
  }
}

const DEFAULT_DEAD_RETENTION_MS = 14 * 24 * 3_600_000;

/** Due times of delayed jobs kept for the look (`expectDue`); beyond them, the idle backoff bounds how late one is found. */
const MAX_DUE_TIMES = 1024;

/**
 * Lets timers and I/O run. On PGlite a query runs synchronously and resolves as a microtask, so a
 * consumer whose handlers only talk to the database would never give the event loop back: HTTP
 * requests in the same process (the API, a delivery's own POST) would starve during a burst.
 */
const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));
