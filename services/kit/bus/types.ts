import { isDependencyUnavailable } from '../errors.js';

/**
 * The bus: publish an event to a topic exchange; consume a queue with manual ack; schedule a
 * redelivery after a delay. Two drivers implement it: RabbitMQ (amqp.ts) and a durable
 * PostgreSQL-backed queue (pg-queue.ts). Handlers never know which one runs.
 */

export interface BusMessage<T = unknown> {
  /** Stable id of the message (for events: the `evt_…` id), the same on every redelivery. */
  id: string;
  routingKey: string;
  body: T;
  headers: Record<string, string>;
  /** True when the broker may have handed this message out before (consumer died before ack). */
  redelivered: boolean;
}

/** What a handler does with a message once it has recorded the outcome. Exactly one call per message. */
export interface Delivery {
  ack(): Promise<void>;
  /** Ack this copy and enqueue it again on the same queue after `delayMs`. */
  retryAfter(delayMs: number, headers?: Record<string, string>): Promise<void>;
  /** Move the message to the queue's dead-letter store. */
  deadLetter(): Promise<void>;
}

export type MessageHandler<T = unknown> = (message: BusMessage<T>, delivery: Delivery) => Promise<void>;

export interface ConsumeOptions {
  queue: string;
  /** Topic patterns (`conversation.*`, `#`) binding the queue to the exchange. Empty: direct queue only. */
  bindings?: string[];
  prefetch?: number;
  /**
   * RabbitMQ only: a queue of this consumer alone, for broadcasts to every live process (each
   * process names its own): exclusive, not durable, deleted by the broker with the consumer's
   * connection, so a process that is gone leaves nothing behind; declared again after a reconnect
   * (what was published meanwhile is lost). No dead letters and no retries: a message whose
   * handler throws is dropped (logged). The PostgreSQL queue refuses it.
   */
  transient?: boolean;
  /**
   * With `transient`: the queue outlives its consumer's connection by this long (the broker's queue
   * expiry, counted from when it last had a consumer) instead of going with it, so a process that
   * reconnects sooner finds what was published meanwhile. The grace covers a lost connection only:
   * a clean stop (the consumer's `cancel`, or the bus's `close` while it consumes) deletes the queue
   * at once, as an exclusive one goes with its consumer. The price: a process that crashed, or that
   * stopped while cut off from the broker, leaves its queue, and what reaches it, for this long.
   * At least 1 s (a shorter grace is raised to that: the broker would delete the queue before its
   * consumer started). Unset or 0: exclusive, deleted with the connection.
   */
  transientGraceMs?: number;
}

export interface Consumer {
  /**
   * Stops taking new messages; in-flight handlers finish. With `drainMs`, waits up to that long for
   * in-flight handlers to settle (RabbitMQ: before closing the channel), so a graceful stop does not
   * turn their acks into redeliveries. Default 0: return at once (RabbitMQ closes the channel, and
   * its unsettled messages are redelivered; on the PostgreSQL queue a bus closed next drops them).
   * RabbitMQ: each broker answer it waits for (the consumer's cancel, its channel's close) is bounded
   * by the confirm bound (`publishTimeoutMs`), so a broker that stopped answering does not hold it.
   * A transient queue goes with it (one with `transientGraceMs` is deleted once the drain is over).
   */
  cancel(options?: { drainMs?: number }): Promise<void>;
}

export interface QueueBacklog {
  /** The queue's name without the bus prefix. */
  queue: string;
  ready: number;
  /** Seconds the oldest due message has waited; null when unknown (RabbitMQ) or nothing waits. */
  oldestSeconds: number | null;
  /** Messages in the queue's dead letters (handlers kept failing on them, or they were unreadable). */
  dead: number;
}

export interface PublishOptions {
  messageId: string;
  headers?: Record<string, string>;
}

export interface Bus {
  readonly driver: 'amqp' | 'pg';
  /** Publishes to the topic exchange; resolves only once the broker has durably accepted it. */
  publish(routingKey: string, body: unknown, options: PublishOptions): Promise<void>;
  /** Sends straight to one queue, optionally after a delay; resolves once durably accepted. */
  send(queue: string, body: unknown, options: PublishOptions & { delayMs?: number; routingKey?: string }): Promise<void>;
  consume<T = unknown>(options: ConsumeOptions, handler: MessageHandler<T>): Promise<Consumer>;
  /**
   * Makes a durable queue and its bindings exist without consuming it, so events published from now
   * on are kept for its consumer even before that consumer first starts (a topic exchange drops what
   * no queue is bound to). Idempotent; `consume` declares the same. RabbitMQ: the queue, its dead
   * letters and the bindings, declared again after every reconnect; PostgreSQL queue: the bindings.
   */
  declare(options: Omit<ConsumeOptions, 'prefetch'>): Promise<void>;
  /** Throws when the broker cannot be reached (readiness). */
  ping(): Promise<void>;
  /**
   * Calls `listener` each time the bus is connected again after losing its broker (RabbitMQ: once
   * the new connection has declared every queue and started every consumer it could), so a caller
   * that kept what it could not publish meanwhile can publish it now. Returns the function that
   * removes it. The PostgreSQL queue has no connection of its own to lose: never called there.
   */
  onReconnect(listener: () => void): () => void;
  /**
   * Consumer lag: messages due on each queue and not yet taken by a consumer (metrics). The
   * PostgreSQL queue reports every queue of this prefix, with the age of the oldest due message;
   * RabbitMQ reports the queues this process consumes, by count only (the broker keeps no age).
   */
  backlog(): Promise<QueueBacklog[]>;
  /** RabbitMQ: deletes first the queues of transient consumers with a grace still consuming (see `transientGraceMs`). */
  close(): Promise<void>;
}

/**
 * A message whose handler throws is offered again after a pause (`handlerErrorDelayMs`), with this
 * header counting the throws in a row. After `MAX_HANDLER_FAILURES` of them it goes to the queue's
 * dead letters (logged) instead of looping for ever, unless the error says a dependency is
 * unavailable (the database or broker away): those are retried as long as the outage lasts. A
 * handler that settles the message itself (`retryAfter` included) starts the count again.
 */
export const HANDLER_FAILURES_HEADER = 'x-handler-failures';
export const MAX_HANDLER_FAILURES = 10;

/** What to do after a handler threw: its count of failures in a row, and whether it is a poison message now. */
export function afterHandlerFailure(headers: Record<string, string>, error: unknown): { failures: number; deadLetter: boolean } {
  const before = Number(headers[HANDLER_FAILURES_HEADER] ?? '0');
  const failures = (Number.isInteger(before) && before > 0 ? before : 0) + 1;
  const unavailable = isDependencyUnavailable(error);
  return { failures, deadLetter: !unavailable && failures >= MAX_HANDLER_FAILURES };
}

/** The headers a retry carries: the failure count only when the retry comes from a failure. */
export function retryHeaders(headers: Record<string, string>, extra: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = { ...headers };
  delete out[HANDLER_FAILURES_HEADER];
  return { ...out, ...extra };
}

/** AMQP topic matching: `*` is exactly one word, `#` zero or more words. */
export function topicMatches(pattern: string, routingKey: string): boolean {
  const p = pattern.split('.');
  const k = routingKey.split('.');
  const match = (i: number, j: number): boolean => {
    if (i === p.length) return j === k.length;
    if (p[i] === '#') {
      for (let n = j; n <= k.length; n++) if (match(i + 1, n)) return true;
      return false;
    }
    if (j === k.length) return false;
    return (p[i] === '*' || p[i] === k[j]) && match(i + 1, j + 1);
  };
  return match(0, 0);
}

/**
 * The exchange a bus really uses: the configured base name under the queue prefix. Every broker
 * object (exchange, queues, dead-letter and delay queues, embedded bindings) carries the prefix, so
 * one setting (`BUS_QUEUE_PREFIX`) isolates a platform on a shared broker.
 */
export function busExchangeName(prefix: string | undefined, exchange: string): string {
  return `${prefix ?? ''}${exchange}`;
}
