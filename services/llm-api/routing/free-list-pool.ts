import { createRequire } from 'node:module';
import type { Http2Session, Settings as Http2Settings } from 'node:http2';
import { Client, Pool, type Dispatcher } from 'undici';

/**
 * undici's Pool with a free list. Pool finds a connection for each request by walking every
 * connection it holds until it meets one that is not busy, and when all are busy it walks them all
 * twice (once to dispatch, once more to learn whether it is now full). A provider connection is
 * busy for a whole stream, so with thousands of streams held each new stream walked thousands of
 * connections: quadratic in the streams held (4 % of the main thread at 6 000 held streams).
 * Here the connections that were last seen free are kept on a stack, and a lookup takes the top
 * one that still is, dropping the busy and closed ones it passes: each connection is passed at
 * most once per time it became free. The last freed comes first, so a warm connection is reused
 * before a new one is opened, and the least used ones are left to reach their keep-alive timeout.
 * Everything else (queueing, draining, closing, events) is Pool's own.
 *
 * It overrides two of Pool's internal methods, reached through the symbols undici's pool-base
 * module exports. When they are missing (another undici), `createProviderPool` falls back to a
 * plain Pool, and `freeListPoolAvailable` is false (a test checks it is true with ours).
 */
interface PoolInternals {
  /** A connection's requests, queued and in flight (undici's core symbols). */
  kSize: symbol;
  /** A connected connection's protocol handler, whose `version` is 'h1' or 'h2' (core symbols). */
  kHTTPContext: symbol;
  /** A connected HTTP/2 connection's session (core symbols). */
  kHTTP2Session: symbol;
  kClients: symbol;
  kNeedDrain: symbol;
  kAddClient: symbol;
  kGetDispatcher: symbol;
}

function loadInternals(): PoolInternals | null {
  try {
    const require = createRequire(import.meta.url);
    const found = require('undici/lib/dispatcher/pool-base.js') as Partial<PoolInternals>;
    const { kClients, kNeedDrain, kAddClient, kGetDispatcher } = found;
    const { kSize, kHTTPContext, kHTTP2Session } = require('undici/lib/core/symbols.js') as Partial<PoolInternals>;
    if (typeof kSize !== 'symbol' || typeof kHTTPContext !== 'symbol' || typeof kHTTP2Session !== 'symbol' || typeof kClients !== 'symbol' || typeof kNeedDrain !== 'symbol' || typeof kAddClient !== 'symbol' || typeof kGetDispatcher !== 'symbol') return null;
    const proto = Pool.prototype as unknown as Record<symbol, unknown>;
    if (typeof proto[kGetDispatcher] !== 'function' || typeof proto[kAddClient] !== 'function') return null;
    return { kSize, kHTTPContext, kHTTP2Session, kClients, kNeedDrain, kAddClient, kGetDispatcher };
  } catch {
    return null;
  }
}

const internals = loadInternals();

/**
 * undici's protocol handler of a connected connection says what it speaks (`h1`, `h2`); it is made
 * on each connect and cleared when the connection closes: undefined while connecting or closed.
 */
function versionOf(connection: Dispatcher): string | undefined {
  if (!internals) return undefined;
  return ((connection as unknown as Record<symbol, { version?: string } | null | undefined>)[internals.kHTTPContext] ?? undefined)?.version;
}

/** True when this undici's internals are the ones the free list relies on. */
export const freeListPoolAvailable = internals !== null;

type Connection = Dispatcher & { closed: boolean; destroyed: boolean; pipelining: number } & Record<symbol, unknown>;
type ClientOptions = ConstructorParameters<typeof Client>[1];

/**
 * How a provider pool's connections share their requests. `fixed`: as `pipelining` says, for every
 * connection (1, or HTTP/2's streams where HTTP/2 is required). `negotiated`: HTTP/2 where the TLS
 * handshake chose it, and then `pipelining` requests at once; one at a time on a connection that
 * speaks HTTP/1.1, where several would be pipelined behind each other.
 */
export type ProviderPoolProtocol = 'fixed' | 'negotiated';

function defineFreeListPool({ kSize, kHTTP2Session, kClients, kNeedDrain, kAddClient, kGetDispatcher }: PoolInternals) {
  class FreeListPool extends Pool {
    /** Connections last seen free, the last freed on top; busy or closed ones are dropped when met. */
    readonly #free: Connection[] = [];
    /** What is on `#free` (a connection is listed once). */
    readonly #listed = new Set<Connection>();
    /** Connections Pool dropped after they failed to connect: never listed again (see constructor). */
    readonly #dropped = new WeakSet<Connection>();
    readonly #limit: number;
    /** Requests one connection carries at once: 1, or HTTP/2's streams per connection (`pipelining`). */
    readonly #perConnection: number;
    readonly #negotiated: boolean;
    /**
     * Whether this origin's last connection to connect speaks HTTP/2, so that a new one will too and
     * may be given requests while it connects. Under `negotiated` it starts false: until the first
     * handshake a burst opens one connection per request, as HTTP/1.1 does.
     */
    #originSpeaksHttp2: boolean;
    /**
     * The streams this origin's server allows on a connection (at most `pipelining`), as its last
     * connection read them from the server's SETTINGS: what a new connection is given while it
     * connects.
     */
    #originStreamLimit: number;
    /** What Pool passes its factory, kept from its first call so later connections skip its walk. */
    #template: { origin: string | URL; options: ClientOptions } | undefined;

    constructor(origin: string | URL, options: Pool.Options & { connections: number }, protocol: ProviderPoolProtocol) {
      // The factory runs only after construction, when the first request needs a connection.
      let template: (origin: string | URL, options: ClientOptions) => void = () => {};
      super(origin, {
        ...options,
        factory: (o, opts) => {
          template(o, opts as ClientOptions);
          return this.#connection(o, opts as ClientOptions);
        },
      });
      template = (o, opts) => (this.#template ??= { origin: o, options: opts });
      this.#limit = options.connections;
      this.#perConnection = Math.max(1, options.pipelining ?? 1);
      this.#negotiated = protocol === 'negotiated' && this.#perConnection > 1;
      this.#originSpeaksHttp2 = !this.#negotiated;
      this.#originStreamLimit = this.#perConnection;
      // Pool drops a connection that failed to connect from its list without closing it. undici
      // resumes such a connection after failing its requests, and a `drain` from it then must not
      // list it again: it would serve requests outside the pool (uncounted against the bound, left
      // open by close). Its drain did not come in the cases tested; this keeps it out if it does.
      this.on('connectionError', (_origin, targets) => {
        for (const target of targets) {
          this.#dropped.add(target as Connection);
          this.#unlist(target as Connection);
        }
      });
    }

    /**
     * A new connection. One that speaks HTTP/2 carries as many requests at once (its `pipelining`,
     * which undici's busy mark and `drain` follow) as its server's SETTINGS allow streams, up to
     * `pipelining`, so that the pool opens another connection rather than queue completions behind
     * the server's limit. Under `negotiated` it carries one until its handshake shows HTTP/2. Its
     * listeners run before Pool's and before undici sends what the connection holds.
     */
    #connection(origin: string | URL, options: ClientOptions): Connection {
      const connection = new Client(origin, this.#negotiated ? { ...options, pipelining: 1 } : options) as unknown as Connection;
      if (this.#perConnection === 1) return connection;
      connection.on('connect', () => {
        // The protocol handler is made anew on each connect; the session is not cleared on close.
        const http2 = versionOf(connection) === 'h2';
        this.#originSpeaksHttp2 = http2;
        // A provider that stopped offering HTTP/2 gets, on this connection, the requests given to
        // it while it connected one after another.
        connection.pipelining = http2 ? this.#originStreamLimit : 1;
        if (!http2) return;
        (connection[kHTTP2Session] as Http2Session).on('remoteSettings', (settings: Http2Settings) => {
          const limit = Math.max(1, Math.min(this.#perConnection, settings.maxConcurrentStreams ?? this.#perConnection));
          this.#originStreamLimit = limit;
          if (connection.pipelining !== limit) connection.pipelining = limit;
        });
      });
      return connection;
    }

    #list(connection: Connection): void {
      if (this.#listed.has(connection) || this.#dropped.has(connection)) return;
      this.#listed.add(connection);
      this.#free.push(connection);
    }

    #unlist(connection: Connection): void {
      if (!this.#listed.delete(connection)) return;
      const at = this.#free.lastIndexOf(connection);
      if (at >= 0) this.#free.splice(at, 1);
    }

    /** Whether a connection carries several requests at once: connected over HTTP/2, or connecting to an origin that speaks it. */
    #multiplexes(connection: Connection): boolean {
      if (this.#perConnection === 1) return false;
      if (!this.#negotiated) return true;
      const version = versionOf(connection);
      return version === undefined ? this.#originSpeaksHttp2 : version === 'h2';
    }

    /**
     * Whether a connection takes another request now. One that carries a request at a time: when
     * undici has not marked it busy. A multiplexed one (HTTP/2): while it holds fewer requests than
     * its stream limit, connected or not, read from its count. Its busy mark is no guide there:
     * undici calls a connecting connection busy (so a burst would open one per request), and its
     * `drain` is emitted a microtask late, clearing the mark after the connection filled up again.
     */
    #hasRoom(connection: Connection): boolean {
      if (connection.closed || connection.destroyed) return false;
      if (!this.#multiplexes(connection)) return !connection[kNeedDrain];
      // Connected: its own limit. Connecting: what its origin's server last allowed.
      const limit = versionOf(connection) === undefined ? this.#originStreamLimit : connection.pipelining;
      return (connection[kSize] as number) < limit;
    }

    [kGetDispatcher](): Dispatcher | undefined {
      for (let top = this.#free.at(-1); top !== undefined; top = this.#free.at(-1)) {
        if (this.#hasRoom(top)) return top;
        this.#free.pop();
        this.#listed.delete(top);
      }
      const self = this as unknown as Record<symbol, unknown>;
      // None free. Pool's own lookup would walk every connection to find that out, then add one.
      if (this.#template === undefined) return (Pool.prototype as unknown as Record<symbol, () => Dispatcher | undefined>)[kGetDispatcher]!.call(this);
      if ((self[kClients] as unknown[]).length >= this.#limit) return undefined;
      const connection = this.#connection(this.#template.origin, this.#template.options);
      (self[kAddClient] as (client: Dispatcher) => void).call(this, connection);
      return connection;
    }

    [kAddClient](client: Connection): this {
      (Pool.prototype as unknown as Record<symbol, (client: Dispatcher) => void>)[kAddClient]!.call(this, client);
      this.#list(client);
      // After Pool's own drain listener, which may have handed it queued work (checked when met).
      client.on('drain', () => this.#list(client));
      return this;
    }
  }
  return FreeListPool;
}

const FreeListPool = internals ? defineFreeListPool(internals) : null;

/** What a connected provider connection speaks: `h2`, `http/1.1`, or `unknown` (not connected, or another undici). */
export function connectionProtocol(connection: Dispatcher): 'h2' | 'http/1.1' | 'unknown' {
  const version = versionOf(connection);
  return version === 'h2' ? 'h2' : version === 'h1' ? 'http/1.1' : 'unknown';
}

/**
 * The pool of one provider origin (an Agent's `factory`): the free-list pool when `connections`
 * bounds it and this undici has the internals it needs, Pool otherwise. A plain Pool cannot tell
 * a connection's protocol, so under `negotiated` it carries one request per connection.
 */
export function createProviderPool(origin: string | URL, options: Pool.Options, protocol: ProviderPoolProtocol = 'fixed'): Pool {
  if (FreeListPool && typeof options.connections === 'number' && options.connections > 0 && options.clientTtl == null) {
    return new FreeListPool(origin, { ...options, connections: options.connections }, protocol);
  }
  return new Pool(origin, protocol === 'negotiated' ? { ...options, pipelining: 1 } : options);
}
