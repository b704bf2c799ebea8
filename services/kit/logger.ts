import { pino, type Logger } from 'pino';

export type { Logger };

interface LoggerOptions {
  level: string;
  name: string;
}

/** How each logger made here was configured, so a service's own logger can share its output. */
const origins = new WeakMap<Logger, { options: LoggerOptions; stream: pino.DestinationStream | undefined }>();

function build(options: LoggerOptions, stream?: pino.DestinationStream): Logger {
  const settings: pino.LoggerOptions = {
    name: options.name,
    level: options.level,
    base: { service: options.name },
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
  const logger = stream ? pino(settings, stream) : pino(settings);
  origins.set(logger, { options, stream });
  return logger;
}

/** JSON logs on stdout. Secrets never reach a log: credential headers are redacted at the source. */
export function createLogger(options: LoggerOptions, stream?: pino.DestinationStream): Logger {
  return build(options, stream);
}

const accessLoggers = new WeakMap<Logger, Logger>();

/**
 * `logger` without its redaction paths, for the one-line-per-request access logs only: their fields
 * are fixed here (request id, method, path without query, status, duration, ids, token counts) and
 * none is an object a redaction path could reach, so redaction found nothing on them, yet it cost
 * more than the rest of writing the line (two lines per chat request in `npm start`).
 * Never pass a caller-supplied object to it.
 */
export function accessLogger(logger: Logger): Logger {
  let access = accessLoggers.get(logger);
  if (!access) {
    access = logger.child({}, { redact: { paths: [] } });
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
