import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { ipv6Prefix } from '../../plugins/core/index.js';
import { errorBody } from '../kit/core/index.js';

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
  /** Open connections one client address may hold; a connection beyond it is closed at once. */
  maxPerAddress: number;
  /** Idle keep-alive (or never-used) connections one address may hold; beyond it the oldest idle one is closed. */
  maxIdlePerAddress: number;
  /** IPv6 peers are grouped by this prefix length (a client usually holds a whole /64). */
  ipv6PrefixLength: number;
  /** Peers never limited (the load balancer in front: every client arrives through it). */
  isTrusted(address: string): boolean;
  /** A connection that has not sent a complete request head within this long is closed (0: no bound). */
  firstRequestTimeoutMs?: number;
  onRefused?(): void;
}

interface Tracked {
  address: string;
  /** Closes a connection that never sends a request (Node bounds only connections that started one). */
  firstRequest: NodeJS.Timeout | null;
  inFlight: number;
  /** When the connection last became idle (accepted, or its last answer finished). */
  idleSince: number;
}

/**
 * Bounds what one client address can hold open on the edge. The server's own timeouts (keep-alive,
 * headers, request: the kit's lifecycle) bound how long a connection that started a request lives;
 * this bounds how many: open connections per address, and idle ones per address (oldest idle
 * closed first), and closes a connection that never sends a request, so one client cannot exhaust
 * the edge's sockets with connections it never uses.
 */
export function guardConnections(server: Server, limits: ConnectionLimits) {
  const byAddress = new Map<string, Set<Socket>>();
  const tracked = new Map<Socket, Tracked>();
  let sequence = 0;
  let refused = 0;

  const keyOf = (peer: string) => (peer.includes(':') ? ipv6Prefix(peer, limits.ipv6PrefixLength) : peer);

  function closeIdleBeyondLimit(address: string): void {
    const sockets = byAddress.get(address);
    if (!sockets) return;
    const idle = [...sockets].filter((s) => tracked.get(s)!.inFlight === 0);
    if (idle.length <= limits.maxIdlePerAddress) return;
    idle.sort((a, b) => tracked.get(a)!.idleSince - tracked.get(b)!.idleSince);
    for (const socket of idle.slice(0, idle.length - limits.maxIdlePerAddress)) socket.destroy();
  }

  server.on('connection', (socket: Socket) => {
    const peer = socket.remoteAddress ?? '';
    if (limits.isTrusted(peer.startsWith('::ffff:') ? peer.slice(7) : peer)) return;
    const address = keyOf(peer);
    let sockets = byAddress.get(address);
    if (!sockets) byAddress.set(address, (sockets = new Set()));
    if (sockets.size >= limits.maxPerAddress) {
      refused++;
      limits.onRefused?.();
      socket.destroy();
      return;
    }
    sockets.add(socket);
    const firstRequest = limits.firstRequestTimeoutMs ? setTimeout(() => timeOut(socket), limits.firstRequestTimeoutMs) : null;
    firstRequest?.unref();
    tracked.set(socket, { address, inFlight: 0, idleSince: sequence++, firstRequest });
    socket.once('close', () => {
      if (firstRequest) clearTimeout(firstRequest);
      tracked.delete(socket);
      sockets!.delete(socket);
      if (sockets!.size === 0) byAddress.delete(address);
    });
    closeIdleBeyondLimit(address);
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
    state.inFlight++;
    let done = false;
    const finished = () => {
      if (done) return;
      done = true;
      state.inFlight--;
      if (state.inFlight === 0) {
        state.idleSince = sequence++;
        // After the answer is flushed: the connection is idle from now on.
        setImmediate(() => closeIdleBeyondLimit(state.address));
      }
    };
    res.once('finish', finished);
    res.once('close', finished);
  });

  return {
    /** Open connections per address (for metrics and tests). */
    openFrom: (peer: string) => byAddress.get(keyOf(peer))?.size ?? 0,
    get refused() {
      return refused;
    },
  };
}
