import { pino, type Logger } from 'pino';

export type { Logger };

/** JSON logs on stdout. Secrets never reach a log: credential headers are redacted at the source. */
export function createLogger(options: { level: string; name: string }): Logger {
  return pino({
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
  });
}
