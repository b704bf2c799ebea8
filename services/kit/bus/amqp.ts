import amqp, { type ChannelModel, type ConfirmChannel, type Channel, type ConsumeMessage } from 'amqplib';
import { serverAddress, serverFailure } from '../errors.js';
import type { Logger } from '../logger.js';
import { afterHandlerFailure, busExchangeName, HANDLER_FAILURES_HEADER, retryHeaders, type Bus, type BusMessage, type ConsumeOptions, type Consumer, type Delivery, type MessageHandler, type PublishOptions, type QueueBacklog } from './types.js';

/**
 * RabbitMQ driver: a durable topic exchange, durable queues, persistent messages, publisher
 * confirms, manual ack with prefetch, a dead-letter queue per work queue, and delays through one
 * TTL queue per delay value that dead-letters back to the work queue (never per-message TTLs in
 * one queue: a long delay at its head would hold back shorter ones). The connection is re-made
 * with backoff; consumers are restored after every reconnect. A channel the broker closes while the
 * connection stays up (a channel error such as a refused declaration, or a consumer the broker
 * cancels because its queue was deleted) is replaced too: the publishing channel at its next use,
 * a consumer's after a backoff.
 */

export interface AmqpBusOptions {
  url: string;
  /** Base name of the topic exchange; the bus declares `${queuePrefix}${exchange}`. */
  exchange: string;
  /** Prefix of every broker object this bus declares: exchange, work, dead-letter and delay queues. */
  queuePrefix?: string;
  prefetch?: number;
  logger: Logger;
  /** Reconnect backoff bounds in ms. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Delay before a message whose handler threw is offered again. */
  handlerErrorDelayMs?: number;
  /**
   * How long a publish waits for the broker's confirm (10 s) before it fails as unavailable. A
   * broker that blocks the connection (a memory or disk alarm) keeps it alive but reads nothing,
   * and heartbeats do not end it: without a bound the outbox relay's pass, and with it a graceful
   * stop, would wait for as long as the alarm lasts. The event stays in the outbox either way.
   */
  publishTimeoutMs?: number;
}

/**
 * How long a connection to AMQP_URL may take, TCP connect and AMQP handshake together (amqplib's
 * socket `timeout`, lifted once the connection is open). A broker that accepts and never answers
 * would otherwise hold the start, or a reconnect, forever.
 */
export const AMQP_CONNECT_TIMEOUT_MS = 10_000;

/** A send the broker returned: no queue of that name exists (it was deleted after it was declared). */
class UnroutableError extends Error {
  constructor(readonly queue: string) {
    super(`the broker returned a message for ${queue}: no such queue`);
    this.name = 'UnroutableError';
  }
}

export class BusUnavailableError extends Error {
  constructor(message = 'message broker is not connected') {
    super(message);
    this.name = 'BusUnavailableError';
  }
}

const ROUTING_KEY_HEADER = 'x-routing-key';
/**
 * The shortest `transientGraceMs` given to the broker. The expiry counts from the queue's
 * declaration, and its consumer starts a few broker round trips later: a grace of a few ms let the
 * broker delete the queue in between (the consume then failed: no such queue), and one under half a
 * millisecond rounded to an expiry of 0, which the broker refuses.
 */
export const MIN_TRANSIENT_GRACE_MS = 1000;

interface ConsumerState {
  options: ConsumeOptions;
  handler: MessageHandler;
  channel?: Channel;
  tag?: string;
  cancelled: boolean;
  /** A restart of this consumer after its channel closed on its own, while one is scheduled. */
  restartTimer?: NodeJS.Timeout;
  restartBackoff?: number;
  /** A start in progress: a restart and a reconnect never open two channels for one consumer. */
  starting?: Promise<void>;
  /** Handlers running now (for a draining cancel). */
  inFlight: Set<Promise<void>>;
}

export async function createAmqpBus(options: AmqpBusOptions): Promise<Bus> {
  const bus = new AmqpBus(options);
  await bus.connect();
  return bus;
}

class AmqpBus implements Bus {
  readonly driver = 'amqp' as const;
  private connection?: ChannelModel;
  private confirm?: ConfirmChannel;
  /** A publishing channel being opened in place of one the broker closed. */
  private confirmOpening?: Promise<ConfirmChannel>;
  private connecting?: Promise<void>;
  private closed = false;
  private backoff: number;
  private reconnectTimer?: NodeJS.Timeout;
  private readonly consumers = new Set<ConsumerState>();
  /** Queues this connection has declared (work queues with their dead letters, delay queues). */
  private readonly declaredQueues = new Set<string>();
  /** Sends (by their correlation id) the broker returned as unroutable: their queue is gone. */
  private readonly returned = new Set<string>();
  private sendSerial = 0;
  /** Queues and bindings asked for with `declare`, declared again on every new connection. */
  private readonly declarations = new Map<string, Set<string>>();
  private readonly reconnectListeners = new Set<() => void>();

  /** The topic exchange, derived from the prefix so platforms sharing a broker never see each other's events. */
  private readonly exchange: string;

  constructor(private readonly options: AmqpBusOptions) {
    this.backoff = options.minBackoffMs ?? 100;
    this.exchange = busExchangeName(options.queuePrefix, options.exchange);
  }

  private q(name: string): string {
    return `${this.options.queuePrefix ?? ''}${name}`;
  }

  /** First connection: fails fast so a misconfigured URL is reported at start. */
  async connect(): Promise<void> {
    await this.establish();
  }

  private async establish(): Promise<void> {
    const url = new URL(this.options.url);
    // Heartbeats detect a stalled (not closed) connection; 10 s unless the URL says otherwise.
    if (!url.searchParams.has('heartbeat')) url.searchParams.set('heartbeat', '10');
    const connection = await amqp.connect(url.toString(), { timeout: AMQP_CONNECT_TIMEOUT_MS }).catch((error: Error & { code?: string }) => {
      // amqplib's own timeout is a bare `connect ETIMEDOUT`, and a refused login a bare "Handshake
      // terminated by server: 403 (ACCESS-REFUSED)": give them a code and the URL's address and
      // port, as a socket error has, so the start ends with one line naming AMQP_URL
      // (`EAUTH` as services/gateway/deps.ts gives a refused Redis password).
      const where = serverAddress(url, url.protocol === 'amqps:' ? 5671 : 5672);
      if (!error.code && /ACCESS[-_]REFUSED/.test(error.message)) throw serverFailure(where, 'EAUTH', 'auth', ' (ACCESS_REFUSED: the broker refused the login)', 'ACCESS_REFUSED');
      if (error.code || error.message !== 'connect ETIMEDOUT') throw error;
      throw serverFailure(where, 'ETIMEDOUT', 'connect', ` (no AMQP handshake within ${AMQP_CONNECT_TIMEOUT_MS} ms)`);
    });
    connection.on('error', (error: Error) => this.options.logger.warn({ err: error.message }, 'amqp connection error'));
    connection.on('close', () => this.onConnectionLost(connection));
    // A resource alarm (memory, disk) makes the broker stop reading publishes: say so, they wait.
    connection.on('blocked', (reason: string) => this.options.logger.warn({ reason }, 'amqp connection blocked by the broker; publishes wait'));
    connection.on('unblocked', () => this.options.logger.info('amqp connection unblocked'));
    const confirm = await this.openConfirm(connection);
    await confirm.assertExchange(this.exchange, 'topic', { durable: true });
    this.declaredQueues.clear();
    // A broker that lost them (a new node, a reset) gets them back before anything is published here.
    try {
      for (const [queue, bindings] of this.declarations) await this.declareBound(confirm, queue, bindings);
    } catch (error) {
      await connection.close().catch(() => {});
      throw error;
    }
    this.connection = connection;
    this.confirm = confirm;
    this.backoff = this.options.minBackoffMs ?? 100;
    // A consumer that cannot start (its queue declared elsewhere with other arguments, say) is
    // retried on its own: it must not keep the connection, publishing and every other consumer down.
    for (const consumer of this.consumers) {
      if (consumer.cancelled) continue;
      clearTimeout(consumer.restartTimer);
      consumer.restartTimer = undefined;
      await this.startConsumer(consumer).catch((error: Error) => {
        this.options.logger.warn({ err: error.message, queue: this.q(consumer.options.queue) }, 'amqp consumer could not start; retrying');
        this.scheduleConsumerRestart(consumer);
      });
    }
  }

  /** A publishing channel on `connection`; forgotten when it closes, so the next use opens another. */
  private async openConfirm(connection: ChannelModel): Promise<ConfirmChannel> {
    const confirm = await connection.createConfirmChannel();
    confirm.on('error', (error: Error) => this.options.logger.warn({ err: error.message }, 'amqp channel error'));
    // The broker returns a mandatory send before it confirms it (basic.return precedes basic.ack).
    confirm.on('return', (message: { properties: { correlationId?: string } }) => {
      const id = message.properties.correlationId;
      if (id) this.returned.add(id);
    });
    confirm.on('close', () => {
      if (this.confirm === confirm) this.confirm = undefined;
    });
    return confirm;
  }

  /**
   * The publishing channel. One the broker closed while the connection stayed up (a refused
   * declaration, a publish it rejected) is replaced here: before, every later publish failed with
   * "Channel closed" until the whole connection dropped, which a healthy connection never does.
   */
  private async confirmChannel(): Promise<ConfirmChannel> {
    if (this.closed) throw new BusUnavailableError();
    if (this.confirm) return this.confirm;
    const connection = this.connection;
    if (!connection) throw new BusUnavailableError();
    this.confirmOpening ??= this.openConfirm(connection)
      .then(async (confirm) => {
        if (this.connection !== connection || this.closed) {
          await confirm.close().catch(() => {});
          throw new BusUnavailableError();
        }
        this.confirm = confirm;
        return confirm;
      })
      .finally(() => (this.confirmOpening = undefined));
    return this.confirmOpening;
  }

  private onConnectionLost(connection: ChannelModel): void {
    if (this.connection !== connection) return;
    this.connection = undefined;
    this.confirm = undefined;
    for (const consumer of this.consumers) consumer.channel = undefined;
    if (this.closed) return;
    this.options.logger.warn('amqp connection lost; reconnecting');
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer || this.connecting) return;
    const delay = Math.round(this.backoff * (0.8 + Math.random() * 0.4));
    this.backoff = Math.min(this.backoff * 2, this.options.maxBackoffMs ?? 5000);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.connecting = this.establish()
        .then(() => {
          this.options.logger.info('amqp reconnected');
          for (const listener of this.reconnectListeners) {
            try {
              listener();
            } catch (error) {
              this.options.logger.warn({ err: (error as Error)?.message }, 'an amqp reconnect listener failed');
            }
          }
        })
        .catch((error: Error) => {
          this.options.logger.warn({ err: error.message }, 'amqp reconnect failed');
          void this.connection?.close().catch(() => {});
          this.connection = undefined;
          this.confirm = undefined;
        })
        .finally(() => {
          this.connecting = undefined;
          if (!this.connection) this.scheduleReconnect();
        });
    }, delay);
    this.reconnectTimer.unref();
  }

  /**
   * Publishes and waits for the broker's confirm. `mandatory` (sends to a queue): a message no queue
   * took is returned by the broker, and the publish then fails with `UnroutableError` instead of
   * resolving as if it had been stored.
   */
  private async confirmPublish(exchange: string, routingKey: string, body: unknown, options: PublishOptions, originalKey: string, mandatory = false): Promise<void> {
    const channel = await this.confirmChannel();
    const content = Buffer.from(JSON.stringify(body));
    const sendId = mandatory ? String(++this.sendSerial) : undefined;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve, reject) => {
      const timeoutMs = this.options.publishTimeoutMs ?? 10_000;
      timer = setTimeout(() => reject(new BusUnavailableError(`publish was not confirmed within ${timeoutMs} ms`)), timeoutMs);
      try {
        channel.publish(
          exchange,
          routingKey,
          content,
          {
            persistent: true,
            mandatory,
            correlationId: sendId,
            messageId: options.messageId,
            contentType: 'application/json',
            type: originalKey,
            headers: { ...options.headers, [ROUTING_KEY_HEADER]: originalKey },
          },
          (error: unknown) => {
            // amqplib's only failures here are the broker's: the channel (or its connection) closed
            // before the confirm ("channel closed"), or the broker nacked. Unavailable, like a
            // publish while disconnected: a handler that published is not counted as failing.
            if (error) return reject(Object.assign(new BusUnavailableError(`publish was not confirmed: ${(error as Error)?.message ?? error}`), { cause: error }));
            if (sendId !== undefined && this.returned.delete(sendId)) return reject(new UnroutableError(routingKey));
            resolve();
          },
        );
      } catch (error) {
        // The channel closed between being handed out and this publish: the broker's fault too.
        reject((error as Error)?.name === 'IllegalOperationError' ? Object.assign(new BusUnavailableError(`publish failed: ${(error as Error).message}`), { cause: error }) : error);
      }
    }).finally(() => {
      clearTimeout(timer);
      if (sendId !== undefined) this.returned.delete(sendId);
    });
  }

  publish(routingKey: string, body: unknown, options: PublishOptions): Promise<void> {
    return this.confirmPublish(this.exchange, routingKey, body, options, routingKey);
  }

  async send(queue: string, body: unknown, options: PublishOptions & { delayMs?: number; routingKey?: string }): Promise<void> {
    const target = this.q(queue);
    const key = options.routingKey ?? queue;
    const delayMs = options.delayMs && options.delayMs > 0 ? Math.round(options.delayMs) : 0;
    // The default exchange drops messages for queues that do not exist: the target is declared
    // first, and declared again if the broker returns the message (the queue was deleted since).
    const attempt = async () => {
      await this.declareWorkQueue(await this.confirmChannel(), target);
      const via = delayMs > 0 ? await this.delayQueue(target, delayMs) : target;
      await this.confirmPublish('', via, body, options, key, true);
    };
    try {
      await attempt();
    } catch (error) {
      if (!(error instanceof UnroutableError)) throw error;
      this.options.logger.warn({ queue: error.queue }, 'amqp send returned: its queue was deleted; declaring it again');
      this.declaredQueues.delete(target);
      this.declaredQueues.delete(error.queue);
      await attempt();
    }
  }

  private async delayQueue(target: string, delayMs: number): Promise<string> {
    const name = `${target}.delay.${delayMs}`;
    if (!this.declaredQueues.has(name)) {
      await (await this.confirmChannel()).assertQueue(name, {
        durable: true,
        arguments: { 'x-message-ttl': delayMs, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': target },
      });
      this.declaredQueues.add(name);
    }
    return name;
  }

  /** A work queue and its dead-letter queue, declared identically by senders and consumers. */
  private async declareWorkQueue(channel: Channel, queue: string, force = false): Promise<void> {
    if (!force && this.declaredQueues.has(queue)) return;
    await channel.assertQueue(`${queue}.dead`, { durable: true });
    await channel.assertQueue(queue, {
      durable: true,
      arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': `${queue}.dead` },
    });
    this.declaredQueues.add(queue);
  }

  /** A work queue (with its dead letters) bound to the exchange with `bindings`. */
  private async declareBound(channel: Channel, queue: string, bindings: Iterable<string>): Promise<void> {
    await this.declareWorkQueue(channel, queue, true);
    for (const pattern of bindings) await channel.bindQueue(queue, this.exchange, pattern);
  }

  async declare(options: Omit<ConsumeOptions, 'prefetch'>): Promise<void> {
    const queue = this.q(options.queue);
    const bindings = this.declarations.get(queue) ?? new Set<string>();
    for (const pattern of options.bindings ?? []) bindings.add(pattern);
    this.declarations.set(queue, bindings);
    await this.declareBound(await this.confirmChannel(), queue, options.bindings ?? []);
  }

  async consume<T>(options: ConsumeOptions, handler: MessageHandler<T>): Promise<Consumer> {
    const state: ConsumerState = { options, handler: handler as MessageHandler, cancelled: false, inFlight: new Set() };
    this.consumers.add(state);
    try {
      if (this.connection) await this.startConsumer(state);
    } catch (error) {
      // The caller learns it has no consumer: none is left behind for a reconnect to start.
      state.cancelled = true;
      this.consumers.delete(state);
      throw error;
    }
    return {
      cancel: async (cancelOptions) => {
        state.cancelled = true;
        this.consumers.delete(state);
        clearTimeout(state.restartTimer);
        state.restartTimer = undefined;
        // Each bounded: a broker that stopped answering must not hold a cancel (a graceful stop).
        if (state.channel && state.tag) await this.answered(state.channel.cancel(state.tag));
        const drainMs = cancelOptions?.drainMs ?? 0;
        if (drainMs > 0 && state.inFlight.size > 0) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            Promise.allSettled([...state.inFlight]),
            new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs))),
          ]);
          clearTimeout(timer);
        }
        if (keptPastConnection(state.options)) await this.answered(this.deleteOwnQueue(state));
        if (state.channel) await this.answered(state.channel.close());
      },
    };
  }

  /**
   * Deletes the queue of a transient consumer with a grace, once it is cancelled: the grace is for a
   * connection lost, and a process that stops cleanly would otherwise leave its queue, and what is
   * published to it, on the broker until the expiry. Its own channel, else (the broker closed that
   * one, the connection up) the publishing channel; without a connection the expiry removes it.
   */
  private async deleteOwnQueue(state: ConsumerState): Promise<void> {
    if (this.closed) return;
    const queue = this.q(state.options.queue);
    const channel = state.channel ?? (this.connection ? await this.confirmChannel() : undefined);
    await channel?.deleteQueue(queue);
  }

  /**
   * Waits for the broker's answer to `request` (a consumer's cancel, its channel's close) for no
   * longer than the confirm bound (`publishTimeoutMs`), failures included. A stalled connection
   * (heartbeats off, or not missed yet) otherwise held `Consumer.cancel` until it dropped, or for
   * ever; a channel left behind this way goes with its connection.
   */
  private async answered(request: Promise<unknown>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      request.then(
        () => {},
        () => {},
      ),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.options.publishTimeoutMs ?? 10_000))),
    ]);
    clearTimeout(timer);
  }

  private async startConsumer(state: ConsumerState): Promise<void> {
    while (state.starting) await state.starting.catch(() => {});
    if (state.channel || state.cancelled) return;
    const starting = this.openConsumer(state);
    state.starting = starting;
    try {
      await starting;
    } finally {
      if (state.starting === starting) state.starting = undefined;
    }
  }

  private async openConsumer(state: ConsumerState): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    const queue = this.q(state.options.queue);
    const channel = await connection.createChannel();
    channel.on('error', (error: Error) => this.options.logger.warn({ err: error.message, queue }, 'amqp consumer channel error'));
    channel.on('close', () => this.onConsumerChannelClosed(state, channel, connection));
    try {
      await channel.assertExchange(this.exchange, 'topic', { durable: true });
      if (state.options.transient) {
        const graceMs = state.options.transientGraceMs;
        await channel.assertQueue(
          queue,
          // Durable although short-lived: RabbitMQ deprecates non-exclusive transient queues; the expiry removes it.
          graceMs && graceMs > 0 ? { durable: true, arguments: { 'x-expires': Math.max(MIN_TRANSIENT_GRACE_MS, Math.round(graceMs)) } } : { durable: false, exclusive: true, autoDelete: true },
        );
        for (const pattern of state.options.bindings ?? []) await channel.bindQueue(queue, this.exchange, pattern);
      } else {
        await this.declareBound(channel, queue, state.options.bindings ?? []);
      }
      await channel.prefetch(state.options.prefetch ?? this.options.prefetch ?? 32);
    } catch (error) {
      await channel.close().catch(() => {});
      throw error;
    }
    if (state.cancelled) {
      // Cancelled while it was being declared: the cancel found no channel to delete it on.
      if (keptPastConnection(state.options)) await channel.deleteQueue(queue).catch(() => {});
      await channel.close().catch(() => {});
      return;
    }
    state.channel = channel;
    const reply = await channel.consume(queue, (raw) => {
      if (!raw) {
        // The broker cancelled this consumer (its queue was deleted, its node went away): without
        // a new channel it would never be handed a message again. The close restarts it.
        this.options.logger.warn({ queue }, 'amqp consumer cancelled by the broker; consuming again');
        void channel.close().catch(() => {});
        return;
      }
      const running = this.dispatch(state, channel, raw);
      state.inFlight.add(running);
      void running.finally(() => state.inFlight.delete(running));
    }, { noAck: false });
    state.tag = reply.consumerTag;
    state.restartBackoff = undefined;
  }

  /**
   * A consumer's channel closed. With the connection, the reconnect restarts every consumer; alone
   * (a channel error, a cancel by the broker), this consumer is started again on a new channel after
   * a backoff (its unacked messages go back to the queue with the channel).
   */
  private onConsumerChannelClosed(state: ConsumerState, channel: Channel, connection: ChannelModel): void {
    if (state.channel !== channel) return;
    state.channel = undefined;
    state.tag = undefined;
    // A lost connection closes its channels before it reports its own close: the timer below finds
    // no connection (or the consumer already restarted by the reconnect) and does nothing.
    if (state.cancelled || this.closed || this.connection !== connection) return;
    this.scheduleConsumerRestart(state);
  }

  private scheduleConsumerRestart(state: ConsumerState): void {
    if (state.restartTimer || state.cancelled || this.closed) return;
    const backoff = state.restartBackoff ?? this.options.minBackoffMs ?? 100;
    state.restartBackoff = Math.min(backoff * 2, this.options.maxBackoffMs ?? 5000);
    state.restartTimer = setTimeout(() => {
      state.restartTimer = undefined;
      // Gone with the connection meanwhile: the reconnect starts it. Already running: nothing to do.
      if (state.cancelled || this.closed || !this.connection || state.channel) return;
      this.options.logger.warn({ queue: this.q(state.options.queue) }, 'amqp consumer starting again on a new channel');
      this.startConsumer(state).catch((error: Error) => {
        this.options.logger.warn({ err: error.message, queue: this.q(state.options.queue) }, 'amqp consumer could not start again; retrying');
        if (this.connection) this.scheduleConsumerRestart(state);
      });
    }, Math.round(backoff * (0.8 + Math.random() * 0.4)));
    state.restartTimer.unref();
  }

  private async dispatch(state: ConsumerState, channel: Channel, raw: ConsumeMessage): Promise<void> {
    const queue = state.options.queue;
    let settled = false;
    const once = async (action: () => Promise<void> | void) => {
      if (settled) return;
      settled = true;
      try {
        await action();
      } catch (error) {
        this.options.logger.warn({ err: (error as Error).message, queue }, 'amqp settle failed; the message will be offered again');
        // A channel that died takes the unacked message with it: the broker offers it again. On a
        // channel still open (a retry whose send failed) it would stay unacked, holding a prefetch
        // slot for as long as the channel lives, until the consumer held only such messages and
        // took no more: it goes back to the queue after a pause (not at once, which would loop).
        const timer = setTimeout(() => {
          try {
            channel.nack(raw, false, true);
          } catch {
            // The channel closed meanwhile: the broker redelivers it.
          }
        }, this.options.handlerErrorDelayMs ?? 5000);
        timer.unref();
      }
    };
    const headers = stringHeaders(raw.properties.headers);
    const routingKey = headers[ROUTING_KEY_HEADER] ?? raw.fields.routingKey;
    delete headers[ROUTING_KEY_HEADER];
    const delivery: Delivery = {
      ack: () => once(() => channel.ack(raw)),
      deadLetter: () => once(() => channel.nack(raw, false, false)),
      retryAfter: (delayMs, extra) =>
        once(async () => {
          // The channel died (the connection dropped, the consumer started again): the broker put
          // this message back and offers it again. A copy sent now would be a second one, each
          // going on with its own retries; as on the PostgreSQL queue, the lost message's settle does nothing.
          if (state.channel !== channel) throw new BusUnavailableError('the consumer channel closed before the retry; the broker offers the message again');
          await this.send(queue, JSON.parse(raw.content.toString('utf8')), {
            messageId: raw.properties.messageId ?? '',
            headers: retryHeaders(headers, extra),
            delayMs,
            routingKey,
          });
          channel.ack(raw);
        }),
    };
    let body: unknown;
    try {
      body = JSON.parse(raw.content.toString('utf8'));
    } catch {
      this.options.logger.error({ queue }, 'unparseable message moved to dead letters');
      return delivery.deadLetter();
    }
    const message: BusMessage = { id: raw.properties.messageId ?? '', routingKey, body, headers, redelivered: raw.fields.redelivered };
    try {
      await state.handler(message, delivery);
    } catch (error) {
      if (state.options.transient) {
        // No dead letters nor retries for a process's own broadcast queue: the message is dropped.
        this.options.logger.error({ err: (error as Error)?.message, queue, message_id: message.id }, 'message handler failed; a transient queue drops the message');
        return delivery.deadLetter();
      }
      const { failures, deadLetter } = afterHandlerFailure(headers, error);
      if (deadLetter) {
        this.options.logger.error({ err: (error as Error)?.message, queue, message_id: message.id, failures }, 'message handler keeps failing; moved to dead letters');
        return delivery.deadLetter();
      }
      this.options.logger.error({ err: (error as Error)?.message, queue, failures }, 'message handler failed; retrying later');
      await delivery.retryAfter(this.options.handlerErrorDelayMs ?? 5000, { [HANDLER_FAILURES_HEADER]: String(failures) });
    }
  }

  async backlog(): Promise<QueueBacklog[]> {
    const connection = this.connection;
    if (!connection) throw new BusUnavailableError();
    const queues = [...new Set([...this.consumers].filter((c) => !c.cancelled && !c.options.transient).map((c) => c.options.queue))];
    if (queues.length === 0) return [];
    // A channel of its own: checking a queue that does not exist closes the channel it is asked on.
    const channel = await connection.createChannel();
    channel.on('error', () => {});
    const out: QueueBacklog[] = [];
    try {
      for (const queue of queues) {
        const info = await channel.checkQueue(this.q(queue)).catch(() => null);
        if (!info) break;
        const dead = await channel.checkQueue(`${this.q(queue)}.dead`).catch(() => null);
        if (!dead) break;
        out.push({ queue, ready: info.messageCount, oldestSeconds: null, dead: dead.messageCount });
      }
    } finally {
      await channel.close().catch(() => {});
    }
    return out;
  }

  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  async ping(): Promise<void> {
    if (!this.connection) throw new BusUnavailableError();
    // A publishing channel the broker closed (the connection up) is replaced here too: readiness
    // must not stay down until something happens to publish.
    await (await this.confirmChannel()).checkExchange(this.exchange);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.connecting?.catch(() => {});
    // A clean close is a clean stop too: the consumers of transient queues with a grace still
    // consuming take their queues along (cancelled first, so the broker does not cancel them).
    const keeping = [...this.consumers].filter((state) => !state.cancelled && state.channel && keptPastConnection(state.options));
    for (const state of keeping) {
      state.cancelled = true;
      this.consumers.delete(state);
    }
    if (keeping.length > 0) {
      await this.answered(
        Promise.allSettled(
          keeping.map(async (state) => {
            const channel = state.channel!;
            if (state.tag) await channel.cancel(state.tag);
            await channel.deleteQueue(this.q(state.options.queue));
          }),
        ),
      );
    }
    const connection = this.connection;
    this.connection = undefined;
    this.confirm = undefined;
    if (!connection) return;
    // Bounded like a cancel: a broker that stopped answering held the close (and the database's
    // close after it in a graceful stop) for as long as the stall lasted. Unanswered, the socket goes.
    let answered = false;
    await this.answered(connection.close().then(() => (answered = true), () => (answered = true)));
    if (!answered) (connection as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream?.destroy?.();
  }
}

/** A transient queue the broker keeps after its consumer's connection is gone (until its expiry). */
function keptPastConnection(options: ConsumeOptions): boolean {
  return options.transient === true && (options.transientGraceMs ?? 0) > 0;
}

function stringHeaders(headers: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers ?? {})) {
    if (typeof value === 'string') out[key] = value;
    else if (typeof value === 'number' || typeof value === 'boolean') out[key] = String(value);
    else if (Buffer.isBuffer(value)) out[key] = value.toString('utf8');
  }
  return out;
}
