import cluster from 'node:cluster';
import { writeSync } from 'node:fs';
import { pino, type Logger } from 'pino';

export type { Logger };

interface LoggerOptions {
  level: string;
  name: string;
}

/**
 * Standard output for every logger made here without a stream of its own: lines are kept until the
 * turn of the event loop ends and leave together, in one write. pino's default destination
 * (sonic-boom 4) appended each line to a pending string while a write was in flight and measured
 * that string with `Buffer.byteLength`, which flattened all of it (up to 16 KiB) once per line:
 * ~4 % of the main thread under load, exactly when lines back up. One destination per process also
 * keeps the lines of the services it hosts in the order they were logged.
 *
 * Each line is encoded as it arrives into one buffer that every turn reuses, so a turn's lines cost
 * no joined string of the turn's size and no fresh buffer for it (off the heap past 4 KiB; two
 * access lines per chat request in `npm start`). A turn with more than the buffer holds writes it
 * out when it fills.
 *
 * The write is synchronous, like `process.stdout` on Linux for files and pipes, so no write is ever
 * in flight: what `flushSync` (or the exit hook, `process.exit` included) writes comes after
 * everything written before. A non-blocking output that is full (EAGAIN) keeps the rest and tries
 * again shortly instead of blocking; a closed one (EPIPE) ends logging, as pino does.
 */
export class LineWriter {
  /** This turn's lines, UTF-8, in `pending[0, used)`. */
  private readonly pending: Buffer;
  private used = 0;
  /** Bytes a full non-blocking output refused, written before any newer line. */
  private rest: Buffer | undefined;
  private scheduled = false;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly fd: number,
    bufferBytes = 64 * 1024,
  ) {
    this.pending = Buffer.allocUnsafe(bufferBytes);
    process.on('exit', () => this.flushSync());
  }

  write(line: string): boolean {
    if (this.closed) return true;
    // UTF-8 takes at most 3 bytes per UTF-16 code unit: a bound that needs no measuring.
    if (this.used + line.length * 3 > this.pending.length && !this.writeOut()) this.spill();
    if (this.closed) return true; // that write found the output gone
    if (line.length * 3 <= this.pending.length) this.used += this.pending.write(line, this.used, 'utf8');
    else {
      // Longer than the buffer holds: behind everything before it, in a buffer of its own.
      this.spill();
      const bytes = Buffer.from(line, 'utf8');
      this.rest = this.rest ? Buffer.concat([this.rest, bytes]) : bytes;
    }
    if (!this.scheduled && !this.retry) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
    return true;
  }

  /** pino's `logger.flush(cb)`: everything logged so far is written before `cb` runs. */
  flush(cb?: (error?: Error) => void): void {
    this.flushSync();
    cb?.();
  }

  /** Writes everything pending now, waiting out a full output for at most `patienceMs`. */
  flushSync(patienceMs = 2000): void {
    const deadline = Date.now() + patienceMs;
    while (!this.writeOut() && Date.now() < deadline) Atomics.wait(pause, 0, 0, 10);
  }

  private readonly onTurn = (): void => {
    this.scheduled = false;
    if (!this.writeOut()) this.retry ??= setTimeout(this.onRetry, 50).unref();
  };

  private readonly onRetry = (): void => {
    this.retry = undefined;
    this.onTurn();
  };

  /** Moves the turn's lines behind the rest, freeing the buffer (the output is full, or a long line comes next). */
  private spill(): void {
    if (this.used === 0) return;
    const turn = Buffer.from(this.pending.subarray(0, this.used));
    this.used = 0;
    this.rest = this.rest ? Buffer.concat([this.rest, turn]) : turn;
  }

  /** True when nothing is left pending. */
  private writeOut(): boolean {
    if (this.closed) return true;
    if (this.rest) {
      this.rest = this.writeAll(this.rest);
      if (this.rest) return false; // the turn's lines wait behind it, in place
    }
    if (this.used > 0) {
      const left = this.writeAll(this.pending.subarray(0, this.used));
      this.used = 0;
      // The buffer is reused for the next lines: what the output refused is copied out of it.
      if (left) this.rest = Buffer.from(left);
    }
    return this.rest === undefined;
  }

  /** Writes `bytes` until done (undefined) or the output is full (what is left); a closed output ends logging. */
  private writeAll(bytes: Buffer): Buffer | undefined {
    let left = bytes;
    while (left.length > 0) {
      try {
        left = left.subarray(writeSync(this.fd, left));
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EBUSY') return left;
        this.rest = undefined;
        this.used = 0;
        if (code === 'EPIPE') {
          this.closed = true;
          return undefined;
        }
        throw error;
      }
    }
    return undefined;
  }
}

const pause = new Int32Array(new SharedArrayBuffer(4));
let stdoutLines: LineWriter | undefined;

/** How each logger made here was configured, so a service's own logger can share its output. */
const origins = new WeakMap<Logger, { options: LoggerOptions; stream: pino.DestinationStream | undefined }>();

function build(options: LoggerOptions, stream?: pino.DestinationStream): Logger {
  const settings: pino.LoggerOptions = {
    name: options.name,
    level: options.level,
    // Copies of the platform under one supervisor (PLATFORM_PROCESSES) share stdout: each line says which.
    base: cluster.isWorker ? { service: options.name, pid: process.pid } : { service: options.name },
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers["x-api-key"]',
        'req.headers["x-gateway-token"]',
        'req.headers.cookie',
        '*.api_key',
        '*.secret',
        '*.password',
        '*.refresh_token',
        '*.access_token',
      ],
      censor: '[redacted]',
    },
  };
  const logger = pino(settings, stream ?? (stdoutLines ??= new LineWriter(1)));
  origins.set(logger, { options, stream });
  return logger;
}

/** JSON logs on stdout. Secrets never reach a log: credential headers are redacted at the source. */
export function createLogger(options: LoggerOptions, stream?: pino.DestinationStream): Logger {
  return build(options, stream);
}

/** The one-line-per-request log of a service or of the edge (`accessLogger`). */
export interface AccessLog {
  debug(entry: AccessEntry, msg: string): void;
  info(entry: AccessEntry, msg: string): void;
  warn(entry: AccessEntry, msg: string): void;
  error(entry: AccessEntry, msg: string): void;
}

/** An access line's fields: ids, method, path, status, durations, token counts. No objects. */
export type AccessEntry = object;

const accessLoggers = new WeakMap<Logger, AccessLog>();
const ACCESS_LEVELS = { debug: 20, info: 30, warn: 40, error: 50 } as const;

/**
 * The access log of `logger`: the same line pino writes for `logger.info(entry, msg)` (level, time,
 * the logger's bindings, the fields in order, msg; same output and level), built in one
 * `JSON.stringify` of the entry instead of pino's per-field serialisation, and without the redaction
 * paths. Its fields are fixed by its two callers (request id, method, path without query, status,
 * duration, ids, token counts) and none is an object a redaction path could reach, so redaction
 * found nothing on them, yet it and pino's field loop cost more than the rest of the line — and
 * there are two such lines per chat request in `npm start`. Never pass a caller-supplied object.
 */
export function accessLogger(logger: Logger): AccessLog {
  let access = accessLoggers.get(logger);
  if (!access) {
    const internals = logger as unknown as Record<symbol, unknown>;
    const line =
      (label: keyof typeof ACCESS_LEVELS) =>
      (entry: AccessEntry, msg: string): void => {
        if (!logger.isLevelEnabled(label)) return;
        const fields = JSON.stringify(entry);
        const stream = internals[pino.symbols.streamSym] as pino.DestinationStream;
        stream.write(
          `{"level":${ACCESS_LEVELS[label]},"time":${Date.now()}${internals[pino.symbols.chindingsSym] as string}${fields.length > 2 ? `,${fields.slice(1, -1)}` : ''},"msg":${JSON.stringify(msg)}}\n`,
        );
      };
    access = { debug: line('debug'), info: line('info'), warn: line('warn'), error: line('error') };
    accessLoggers.set(logger, access);
  }
  return access;
}

/**
 * The logger of one service or worker inside a process that hosts several (`npm start`): the same
 * output and level as `parent`, with `service` (and `name`) set to `service`. A pino child would
 * repeat the key (`"service":"platform",…,"service":"llm-api"`), because bindings are appended, not
 * replaced; a sibling logger writes each key once.
 */
export function serviceLogger(parent: Logger, service: string): Logger {
  const origin = origins.get(parent);
  if (origin) {
    const logger = build({ ...origin.options, name: service, level: parent.level }, origin.stream);
    return logger;
  }
  // A logger made elsewhere (tests): add the binding only when it does not carry one already.
  return 'service' in parent.bindings() ? parent : parent.child({ service });
}
