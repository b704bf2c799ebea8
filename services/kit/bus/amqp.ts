import amqp, { type ChannelModel, type ConfirmChannel, type Channel, type ConsumeMessage } from 'amqplib';
import type { Logger } from '../logger.js';
import { busExchangeName, type Bus, type BusMessage, type ConsumeOptions, type Consumer, type Delivery, type MessageHandler, type PublishOptions, type QueueBacklog } from './types.js';

/**
 * RabbitMQ driver: a durable topic exchange, durable queues, persistent messages, publisher
 * confirms, manual ack with prefetch, a dead-letter queue per work queue, and delays through one
 * TTL queue per delay value that dead-letters back to the work queue (never per-message TTLs in
 * one queue: a long delay at its head would hold back shorter ones). The connection is re-made
 * with backoff; consumers are restored after every reconnect.
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
}

export class BusUnavailableError extends Error {
  constructor(message = 'message broker is not connected') {
    super(message);
    this.name = 'BusUnavailableError';
  }
}

const ROUTING_KEY_HEADER = 'x-routing-key';

interface ConsumerState {
  options: ConsumeOptions;
  handler: MessageHandler;
  channel?: Channel;
  tag?: string;
  cancelled: boolean;
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
  private connecting?: Promise<void>;
  private closed = false;
  private backoff: number;
  private reconnectTimer?: NodeJS.Timeout;
  private readonly consumers = new Set<ConsumerState>();
  /** Queues this connection has declared (work queues with their dead letters, delay queues). */
  private readonly declaredQueues = new Set<string>();
  /** Queues and bindings asked for with `declare`, declared again on every new connection. */
  private readonly declarations = new Map<string, Set<string>>();

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
    const connection = await amqp.connect(url.toString());
    connection.on('error', (error: Error) => this.options.logger.warn({ err: error.message }, 'amqp connection error'));
    connection.on('close', () => this.onConnectionLost(connection));
    const confirm = await connection.createConfirmChannel();
    confirm.on('error', (error: Error) => this.options.logger.warn({ err: error.message }, 'amqp channel error'));
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
    for (const consumer of this.consumers) if (!consumer.cancelled) await this.startConsumer(consumer);
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
        .then(() => this.options.logger.info('amqp reconnected'))
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

  private channelOrThrow(): ConfirmChannel {
    if (!this.confirm || this.closed) throw new BusUnavailableError();
    return this.confirm;
  }

  private async confirmPublish(exchange: string, routingKey: string, body: unknown, options: PublishOptions, originalKey: string): Promise<void> {
    const channel = this.channelOrThrow();
    const content = Buffer.from(JSON.stringify(body));
    await new Promise<void>((resolve, reject) => {
      try {
        channel.publish(
          exchange,
          routingKey,
          content,
          {
            persistent: true,
            messageId: options.messageId,
            contentType: 'application/json',
            type: originalKey,
            headers: { ...options.headers, [ROUTING_KEY_HEADER]: originalKey },
          },
          (error: unknown) => (error ? reject(error instanceof Error ? error : new BusUnavailableError('publish was not confirmed')) : resolve()),
        );
      } catch (error) {
        reject(error);
      }
    });
  }

  publish(routingKey: string, body: unknown, options: PublishOptions): Promise<void> {
    return this.confirmPublish(this.exchange, routingKey, body, options, routingKey);
  }

  async send(queue: string, body: unknown, options: PublishOptions & { delayMs?: number; routingKey?: string }): Promise<void> {
    const target = this.q(queue);
    const key = options.routingKey ?? queue;
    // The default exchange drops messages for queues that do not exist yet: declare the target first.
    await this.declareWorkQueue(this.channelOrThrow(), target);
    if (!options.delayMs || options.delayMs <= 0) {
      return this.confirmPublish('', target, body, options, key);
    }
    const delayQueue = await this.delayQueue(target, Math.round(options.delayMs));
    return this.confirmPublish('', delayQueue, body, options, key);
  }

  private async delayQueue(target: string, delayMs: number): Promise<string> {
    const name = `${target}.delay.${delayMs}`;
    if (!this.declaredQueues.has(name)) {
      await this.channelOrThrow().assertQueue(name, {
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
    await this.declareBound(this.channelOrThrow(), queue, options.bindings ?? []);
  }

  async consume<T>(options: ConsumeOptions, handler: MessageHandler<T>): Promise<Consumer> {
    const state: ConsumerState = { options, handler: handler as MessageHandler, cancelled: false, inFlight: new Set() };
    this.consumers.add(state);
    if (this.connection) await this.startConsumer(state);
    return {
      cancel: async (cancelOptions) => {
        state.cancelled = true;
        this.consumers.delete(state);
        if (state.channel && state.tag) await state.channel.cancel(state.tag).catch(() => {});
        const drainMs = cancelOptions?.drainMs ?? 0;
        if (drainMs > 0 && state.inFlight.size > 0) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            Promise.allSettled([...state.inFlight]),
            new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs))),
          ]);
          clearTimeout(timer);
        }
        await state.channel?.close().catch(() => {});
      },
    };
  }

  private async startConsumer(state: ConsumerState): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    const queue = this.q(state.options.queue);
    const channel = await connection.createChannel();
    channel.on('error', (error: Error) => this.options.logger.warn({ err: error.message, queue }, 'amqp consumer channel error'));
    await channel.assertExchange(this.exchange, 'topic', { durable: true });
    await this.declareBound(channel, queue, state.options.bindings ?? []);
    await channel.prefetch(state.options.prefetch ?? this.options.prefetch ?? 32);
    state.channel = channel;
    const reply = await channel.consume(queue, (raw) => {
      if (!raw) return;
      const running = this.dispatch(state, channel, raw);
      state.inFlight.add(running);
      void running.finally(() => state.inFlight.delete(running));
    }, { noAck: false });
    state.tag = reply.consumerTag;
  }

  private async dispatch(state: ConsumerState, channel: Channel, raw: ConsumeMessage): Promise<void> {
    let settled = false;
    const once = async (action: () => Promise<void> | void) => {
      if (settled) return;
      settled = true;
      try {
        await action();
      } catch (error) {
        // The channel died: the broker redelivers the unacked message (at-least-once).
        this.options.logger.warn({ err: (error as Error).message }, 'amqp settle failed');
      }
    };
    const headers = stringHeaders(raw.properties.headers);
    const routingKey = headers[ROUTING_KEY_HEADER] ?? raw.fields.routingKey;
    delete headers[ROUTING_KEY_HEADER];
    const queue = state.options.queue;
    const delivery: Delivery = {
      ack: () => once(() => channel.ack(raw)),
      deadLetter: () => once(() => channel.nack(raw, false, false)),
      retryAfter: (delayMs, extra) =>
        once(async () => {
          await this.send(queue, JSON.parse(raw.content.toString('utf8')), {
            messageId: raw.properties.messageId ?? '',
            headers: { ...headers, ...extra },
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
      this.options.logger.error({ err: (error as Error).message, queue }, 'message handler failed; retrying later');
      await delivery.retryAfter(this.options.handlerErrorDelayMs ?? 5000);
    }
  }

  async backlog(): Promise<QueueBacklog[]> {
    const connection = this.connection;
    if (!connection) throw new BusUnavailableError();
    const queues = [...new Set([...this.consumers].filter((c) => !c.cancelled).map((c) => c.options.queue))];
    if (queues.length === 0) return [];
    // A channel of its own: checking a queue that does not exist closes the channel it is asked on.
    const channel = await connection.createChannel();
    channel.on('error', () => {});
    const out: QueueBacklog[] = [];
    try {
      for (const queue of queues) {
        const info = await channel.checkQueue(this.q(queue)).catch(() => null);
        if (!info) break;
        out.push({ queue, ready: info.messageCount, oldestSeconds: null });
      }
    } finally {
      await channel.close().catch(() => {});
    }
    return out;
  }

  async ping(): Promise<void> {
    if (!this.connection || !this.confirm) throw new BusUnavailableError();
    await this.confirm.checkExchange(this.exchange);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.connecting?.catch(() => {});
    const connection = this.connection;
    this.connection = undefined;
    this.confirm = undefined;
    await connection?.close().catch(() => {});
  }
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
