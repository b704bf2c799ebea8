import { readFileSync } from 'node:fs';
import type { IncomingMessage, RequestListener, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ipv6Prefix } from '../../plugins/core/index.js';
import { acceptRequestId, errorBody } from '../kit/core/index.js';
import { sendJson } from './proxy.js';

const TIMEOUT_BODY = JSON.stringify(errorBody(408, 'The request headers did not arrive in time', { code: 'request_timeout' }));
/** What a client that never completed its request head gets before the connection closes (as Node's own header timeout answers). */
const TIMEOUT_RESPONSE =
  'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n' +
  `Content-Length: ${Buffer.byteLength(TIMEOUT_BODY)}\r\n\r\n${TIMEOUT_BODY}`;

/** The most of an unwanted request body the edge reads and discards to keep a connection alive. */
const DRAIN_LIMIT_BYTES = 8 * 1024 * 1024;

/** Answers 408 and closes; a peer that does not read the answer is cut shortly after. */
function timeOut(socket: Socket): void {
  if (!socket.writable) return void socket.destroy();
  socket.end(TIMEOUT_RESPONSE);
  setTimeout(() => socket.destroy(), 1000).unref();
}

export interface ConnectionLimits {
  /**
   * Connections the server holds open at once, from every address (trusted peers included: a load
   * balancer in front carries every client). A request on a connection beyond it is answered 503
   * and the connection closed after the answer. Unset: no bound. The answer takes the place of the
   * server's request listeners attached before `guardConnections` is called (attach them first).
   */
  maxOpen?: number;
  /** Open connections one client address may hold; a connection beyond it is closed at once. */
  maxPerAddress: number;
  /**
   * Connections one address may keep for later (kept alive after an answer, or never used). An
   * answer on a connection beyond it says `Connection: close`; never-used ones beyond it are closed,
   * oldest first.
   */
  maxIdlePerAddress: number;
  /** IPv6 peers are grouped by this prefix length (a client usually holds a whole /64). */
  ipv6PrefixLength: number;
  /** Peers never limited (the load balancer in front: every client arrives through it). */
  isTrusted(address: string): boolean;
  /** A connection that has not sent a complete request head within this long is closed (0: no bound). */
  firstRequestTimeoutMs?: number;
  onRefused?(): void;
  /** A connection over `maxOpen` arrived (its request is answered 503). */
  onOverCapacity?(): void;
}

interface Tracked {
  group: AddressGroup;
  /** Closes a connection that never sends a request (Node bounds only connections that started one). */
  firstRequest: NodeJS.Timeout | null;
  /** Its current answer says `Connection: close`: it is on its way out and no longer counts as kept. */
  closing: boolean;
}

interface AddressGroup {
  key: string;
  sockets: Set<Socket>;
  /**
   * The never-used ones among `sockets`, oldest first (a Set keeps insertion order): the oldest is
   * found without scanning the address's connections, which made each new connection cost time in
   * proportion to those the address already held.
   */
  unused: Set<Socket>;
  /** How many of `sockets` are closing after their current answer. */
  closing: number;
}

/**
 * Bounds what one client address can hold open on the edge. The server's own timeouts (keep-alive,
 * headers, request: the kit's lifecycle) bound how long a connection lives; this bounds how many:
 * open connections per address, and connections kept for later per address, and closes a
 * connection that never sends a request, so one client cannot exhaust the edge's sockets with
 * connections it never uses.
 *
 * A connection that has answered is never closed from under the client: between the answer and the
 * close, the client may already be sending its next request on it (HTTP/1.1 keep-alive has no
 * handshake for that), and that request would fail with a reset. Instead, while an address holds
 * more connections than it may keep, each answer tells the client to close that connection
 * (`Connection: close`) and the server closes it after the answer: the client's pool shrinks
 * without a failed request. Only connections that never carried a request are closed outright.
 */
export function guardConnections(server: Server, limits: ConnectionLimits) {
  const groups = new Map<string, AddressGroup>();
  const tracked = new Map<Socket, Tracked>();
  let refused = 0;
  let open = 0;
  const overCapacity = new WeakSet<Socket>();
  if (limits.maxOpen !== undefined) answerOverCapacity(server, overCapacity);

  const keyOf = (peer: string) => (peer.includes(':') ? ipv6Prefix(peer, limits.ipv6PrefixLength) : peer);

  /** Never-used connections beyond what the address may keep: the oldest go first. */
  function closeUnusedBeyondLimit(group: AddressGroup): void {
    for (const oldest of group.unused) {
      if (group.unused.size <= limits.maxIdlePerAddress) return;
      group.unused.delete(oldest);
      oldest.destroy();
    }
  }

  server.on('connection', (socket: Socket) => {
    open++;
    socket.once('close', () => open--);
    // Beyond the bound a connection is kept only long enough to answer its request (503). It still
    // counts against its address below, so that one address cannot hold more of them than of any other.
    const over = limits.maxOpen !== undefined && open > limits.maxOpen;
    const peer = socket.remoteAddress ?? '';
    const trusted = limits.isTrusted(peer.startsWith('::ffff:') ? peer.slice(7) : peer);
    if (trusted && !over) return;
    let group: AddressGroup | undefined;
    if (!trusted) {
      const key = keyOf(peer);
      group = groups.get(key);
      if (!group) groups.set(key, (group = { key, sockets: new Set(), unused: new Set(), closing: 0 }));
      if (group.sockets.size >= limits.maxPerAddress) {
        refused++;
        limits.onRefused?.();
        socket.destroy();
        return;
      }
    }
    if (over) {
      overCapacity.add(socket);
      limits.onOverCapacity?.();
    }
    const firstRequest = limits.firstRequestTimeoutMs ? setTimeout(() => timeOut(socket), limits.firstRequestTimeoutMs) : null;
    firstRequest?.unref();
    // A trusted peer's connection over the bound: bounded in time only, not tracked per address.
    if (!group) return void (firstRequest && socket.once('close', () => clearTimeout(firstRequest)));
    group.sockets.add(socket);
    group.unused.add(socket);
    const state: Tracked = { group, closing: false, firstRequest };
    tracked.set(socket, state);
    const owner = group;
    socket.once('close', () => {
      if (state.firstRequest) clearTimeout(state.firstRequest);
      if (state.closing) owner.closing--;
      tracked.delete(socket);
      owner.sockets.delete(socket);
      owner.unused.delete(socket);
      if (owner.sockets.size === 0) groups.delete(owner.key);
    });
    closeUnusedBeyondLimit(group);
  });

  server.on('request', (req, res) => {
    // An answer given before the client finished sending its body (a refusal: no credential, too
    // large): Node reads and discards the rest to keep the connection alive, whatever size the
    // client announced. Up to DRAIN_LIMIT_BYTES that is cheaper than a reset for the client's next
    // request; beyond it (or a body of unknown length) the connection closes once the answer is flushed.
    res.once('finish', () => {
      if (req.complete) return;
      const declared = Number(req.headers['content-length']);
      if (!Number.isFinite(declared) || declared > DRAIN_LIMIT_BYTES) req.socket.destroySoon();
    });
    const state = tracked.get(req.socket);
    if (!state) return;
    if (state.firstRequest) {
      clearTimeout(state.firstRequest);
      state.firstRequest = null;
    }
    const group = state.group;
    group.unused.delete(req.socket);
    if (!state.closing && group.sockets.size - group.closing > limits.maxIdlePerAddress) {
      // Node answers with `Connection: close` and ends the connection after this answer.
      state.closing = true;
      group.closing++;
      res.shouldKeepAlive = false;
    }
  });

  return {
    /** Open connections per address (for metrics and tests). */
    openFrom: (peer: string) => groups.get(keyOf(peer))?.sockets.size ?? 0,
    /** Open connections from every address. */
    get open() {
      return open;
    },
    get refused() {
      return refused;
    },
  };
}

const BUSY_MESSAGE = 'The gateway holds as many connections as it may; retry shortly';

/**
 * A request on a connection over the open-connection bound gets a 503 in place of the server's own
 * handling, and the connection closes after it. The request is read and answered (not cut at
 * accept): a client whose request was already on the wire gets an answer it can retry on, where a
 * close with its bytes unread would reach it as a reset. The server's request listeners are wrapped
 * rather than joined because every listener of an event runs: one added beside them could answer,
 * but not stop them.
 */
function answerOverCapacity(server: Server, overCapacity: WeakSet<Socket>): void {
  const handlers = server.listeners('request') as RequestListener[];
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (!overCapacity.has(req.socket)) {
      for (const handler of handlers) handler.call(server, req, res);
      return;
    }
    const requestId = acceptRequestId(req.headers['x-request-id'] as string | undefined);
    res.shouldKeepAlive = false;
    sendJson(res, 503, errorBody(503, BUSY_MESSAGE, { code: 'server_busy', requestId }), { 'retry-after': '1', 'x-request-id': requestId });
  });
}

/** Reserved for what a process opens besides its connections: files, listeners, database and broker pools. */
const RESERVED_FILES = 512;

/**
 * The open-connection bound `auto` stands for: what the process's open-file limit leaves after a
 * reserve, over the sockets a request in flight holds (`socketsPerRequest`, default 2: its client's,
 * and its service's or provider's). Undefined (no bound) where the limit cannot be read (not Linux)
 * or is unlimited.
 */
export function connectionsForOpenFileLimit(limits: string = readProcLimits(), socketsPerRequest = 2): number | undefined {
  const soft = softOpenFileLimit(limits);
  return Number.isFinite(soft) ? Math.max(1, Math.floor((soft - RESERVED_FILES) / socketsPerRequest)) : undefined;
}

/** The soft open-file limit in the text of a `/proc/<pid>/limits` file: Infinity when unlimited, NaN when absent. */
export function softOpenFileLimit(limits: string): number {
  const soft = /^Max open files\s+(\d+|unlimited)/m.exec(limits)?.[1];
  if (soft === 'unlimited') return Infinity;
  return soft ? Number(soft) : Number.NaN;
}

function readProcLimits(): string {
  try {
    return readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return '';
  }
}
