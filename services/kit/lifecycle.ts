import type { Server } from 'node:http';
import type { Express } from 'express';
import type { Logger } from './logger.js';

export interface RunningServer {
  server: Server;
  port: number;
  /** Stops accepting, lets in-flight requests (streams included) finish up to `timeoutMs`, then cuts the rest. */
  close(timeoutMs: number): Promise<void>;
}

export function listen(app: Express, options: { host: string; port: number }): Promise<RunningServer> {
  return new Promise((resolve, reject) => {
    const server = app.listen(options.port, options.host);
    server.keepAliveTimeout = 65_000; // above common load-balancer idle timeouts
    server.headersTimeout = 66_000;
    server.requestTimeout = 0; // streams may run long; idle sockets are bounded by keepAliveTimeout
    server.once('error', reject);
    server.once('listening', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : options.port;
      resolve({ server, port, close: (timeoutMs) => drain(server, timeoutMs) });
    });
  });
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
 * Runs `steps` once on SIGTERM or SIGINT, in order, then exits 0 (1 if a step failed).
 * Steps: close servers (drain), stop workers and relays, flush batches, close bus and database.
 */
export function exitOnSignals(logger: Logger, steps: Array<[string, () => Promise<void>]>): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    let failed = false;
    for (const [name, step] of steps) {
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
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}
