import http, { STATUS_CODES, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Express } from 'express';
import { errorBody } from './errors.js';
import { acceptRequestId } from './ids.js';
import type { Logger } from './logger.js';
import { serviceHttpObjects } from './http/request-objects.js';

export interface RunningServer {
  server: Server;
  port: number;
  /** Stops accepting, lets in-flight requests (streams included) finish up to `timeoutMs`, then cuts the rest. */
  close(timeoutMs: number): Promise<void>;
}

export interface ServerTimeouts {
  /** Idle keep-alive connections are closed after this long. */
  keepAliveTimeoutMs: number;
  /** Complete request headers must arrive within this long, also on a connection that never sent a request. */
  headersTimeoutMs: number;
  /** The whole request (headers and body) must arrive within this long; 0 = no limit. Answers are not limited. */
  requestTimeoutMs: number;
}

export const DEFAULT_SERVER_TIMEOUTS: ServerTimeouts = { keepAliveTimeoutMs: 65_000, headersTimeoutMs: 20_000, requestTimeoutMs: 300_000 };

/** The server timeouts from the platform settings (`HTTP_*_TIMEOUT_MS`). */
export function serverTimeouts(config: { HTTP_KEEP_ALIVE_TIMEOUT_MS: number; HTTP_HEADERS_TIMEOUT_MS: number; HTTP_REQUEST_TIMEOUT_MS: number }): ServerTimeouts {
  return {
    keepAliveTimeoutMs: config.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    headersTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    requestTimeoutMs: config.HTTP_REQUEST_TIMEOUT_MS,
  };
}

/**
 * Listens with bounded connections: Node checks the header and request deadlines only every
 * `connectionsCheckingInterval` (30 s by default), so the interval follows the header timeout
 * and a slow client (one byte a second) is cut within about 1.25 × `headersTimeoutMs`.
 * `backlog`: connections the kernel holds before they are accepted (`HTTP_LISTEN_BACKLOG`; Node's default 511).
 */
export function listen(app: Express, options: { host: string; port: number; timeouts?: ServerTimeouts; backlog?: number }): Promise<RunningServer> {
  const timeouts = options.timeouts ?? DEFAULT_SERVER_TIMEOUTS;
  return new Promise((resolve, reject) => {
    const server = http.createServer(
      {
        // Requests and responses built with Express's members: no prototype change per request.
        ...serviceHttpObjects,
        keepAliveTimeout: timeouts.keepAliveTimeoutMs,
        // Node requires headersTimeout <= requestTimeout when the latter is set.
        headersTimeout: timeouts.requestTimeoutMs > 0 ? Math.min(timeouts.headersTimeoutMs, timeouts.requestTimeoutMs) : timeouts.headersTimeoutMs,
        requestTimeout: timeouts.requestTimeoutMs,
        connectionsCheckingInterval: Math.max(50, Math.min(5_000, Math.floor(timeouts.headersTimeoutMs / 4))),
      },
      app,
    );
    server.on('clientError', answerClientError);
    server.once('error', reject);
    server.once('listening', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : options.port;
      resolve({ server, port, close: (timeoutMs) => drain(server, timeoutMs) });
    });
    server.listen({ port: options.port, host: options.host, backlog: options.backlog });
  });
}

const CLIENT_ERRORS: Record<string, { status: number; message: string }> = {
  HPE_HEADER_OVERFLOW: { status: 431, message: 'The request headers are too large' },
  HPE_CHUNK_EXTENSIONS_OVERFLOW: { status: 413, message: 'The chunk extensions of the request body are too large' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, message: 'The request did not arrive in time' },
};
const MALFORMED = { status: 400, message: 'The request is not well-formed HTTP (its head, or its Content-Length and Transfer-Encoding)' };

/**
 * A request Node's parser refuses (a broken head, conflicting lengths, headers too large, too slow
 * to arrive) is answered with the platform's error body and a request id, like every other
 * refusal, where Node would write a bare status line; then the connection closes. As in Node, only
 * a connection that has not been answered yet gets an answer.
 */
function answerClientError(error: Error & { code?: string }, socket: Duplex): void {
  const net = socket as Duplex & { bytesWritten?: number };
  if (error.code === 'ECONNRESET' || !socket.writable || (net.bytesWritten ?? 0) > 0) {
    socket.destroy();
    return;
  }
  const { status, message } = CLIENT_ERRORS[error.code ?? ''] ?? MALFORMED;
  const requestId = acceptRequestId(undefined);
  const body = JSON.stringify(errorBody(status, message, { requestId }));
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-ID: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}

function drain(server: Server, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    let finished = false;
    const done = () => {
      if (finished) return;
      finished = true;
      clearInterval(idleSweep);
      clearTimeout(deadline);
      resolve();
    };
    server.close(() => done());
    // Keep-alive sockets with no request in flight would hold close() open; close them as they idle.
    server.closeIdleConnections();
    const idleSweep = setInterval(() => server.closeIdleConnections(), 100);
    const deadline = setTimeout(() => {
      server.closeAllConnections();
      done();
    }, timeoutMs);
    deadline.unref();
  });
}

/**
 * From the moment a process starts draining, its `/readyz` answers 503 (check `shutdown`), so a
 * load balancer polling it stops sending new work while in-flight requests finish.
 */
export function markDraining(readiness: Record<string, () => Promise<void>>): void {
  readiness.shutdown = () => Promise.reject(new Error('the process is shutting down'));
}

/**
 * How long a whole stop may take: the drain (`SHUTDOWN_TIMEOUT_MS`) plus 15 s to stop workers, flush
 * batches and close the bus and the database. Below a Node timer's longest delay.
 */
export function shutdownBoundMs(drainMs: number): number {
  return Math.min(2_147_483_647, drainMs + 15_000);
}

/**
 * Runs `steps` once on SIGTERM or SIGINT, in order, then exits 0 (1 if a step failed).
 * Steps: close servers (drain), stop workers and relays, flush batches, close bus and database.
 * A second signal while the steps run exits at once (code 1): the operator does not want to wait
 * for the drain timeout. Returns the same stop for a request that is not a signal (a supervising
 * process asking its child to stop): it starts the steps once and never counts as a signal, before
 * or after the first one, since a Ctrl-C reaches the supervisor's children as well as the supervisor.
 * `timeoutMs`: the whole stop is bounded; a stop still running then exits 1 with a line naming the step.
 */
export function exitOnSignals(
  logger: Logger,
  steps: Array<[string, () => Promise<void>]>,
  options: { timeoutMs?: number } = {},
): (reason: string) => void {
  let stopping = false;
  // The step running now, named if the whole stop outlasts `timeoutMs`.
  let current = '';
  // Signals seen: a stop started by a request (a supervisor's) and then the terminal's or the
  // process group's signal is one stop; only a second signal exits at once.
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (stopping && signals === 1) {
      logger.info({ signal }, 'signal while stopping on request: still draining');
      return;
    }
    void stop(signal);
  };
  const stop = async (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting without waiting for the drain');
      logger.flush?.();
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    // A step that never ends (a database or broker that never answers its close) must not keep the
    // process: past the bound it exits 1, naming the step. Not unref'd: it may be all that is left.
    if (options.timeoutMs !== undefined) {
      setTimeout(() => {
        logger.error({ step: current, timeout_ms: options.timeoutMs }, 'shutdown did not finish in time: exiting without waiting for it');
        logger.flush?.();
        process.exit(1);
      }, options.timeoutMs);
    }
    let failed = false;
    for (const [name, step] of steps) {
      current = name;
      try {
        await step();
      } catch (error) {
        failed = true;
        logger.error({ err: (error as Error).message, step: name }, 'shutdown step failed');
      }
    }
    logger.info('stopped');
    logger.flush?.();
    process.exit(failed ? 1 : 0);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return (reason) => {
    if (!stopping) void stop(reason);
  };
}
