import { z } from 'zod';

/**
 * The webhooks' own settings, read by llm-api (the rotation grace period) and by
 * workers/webhook-delivery (everything else). Parse with the kit's `loadConfig(webhooksConfigShape,
 * ctx.runtime.config.env)`; README.md documents each.
 */
/** The longest delay between attempts: within what a Node timer (~24.8 days) and a RabbitMQ message TTL can wait. */
const MAX_RETRY_DELAY_MS = 24 * 86_400_000;

export const webhooksConfigShape = {
  /** Delays before attempts 2..n after a failed attempt; units ms, s, m, h, d. */
  WEBHOOK_RETRY_SCHEDULE: z
    .string()
    .default('5s,25s,2m,10m,50m,4h,24h')
    .transform((value, ctx) => {
      const steps = value.split(',').map((part) => part.trim()).filter(Boolean);
      const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
      const out: number[] = [];
      for (const step of steps) {
        const match = /^(\d+)(ms|s|m|h|d)$/.exec(step);
        if (!match) {
          ctx.addIssue({ code: 'custom', message: `"${step}" is not a duration such as 500ms, 5s, 2m, 4h` });
          return z.NEVER;
        }
        const ms = Number(match[1]) * units[match[2]!]!;
        if (ms > MAX_RETRY_DELAY_MS) {
          ctx.addIssue({ code: 'custom', message: `"${step}" is longer than 24d, the longest delay between attempts` });
          return z.NEVER;
        }
        out.push(ms);
      }
      if (out.length > 50) {
        ctx.addIssue({ code: 'custom', message: 'at most 50 steps (51 attempts)' });
        return z.NEVER;
      }
      return out;
    }),
  /** Per-attempt HTTP timeout (whole request, headers and body). */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(1).default(10000),
  /** How long the previous secret still signs deliveries after a rotation. */
  WEBHOOK_SECRET_GRACE_SECONDS: z.coerce.number().int().min(0).max(365 * 86400).default(86400),
  /** Attempts in flight at once per subscription (one slow receiver never blocks the others). */
  WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: z.coerce.number().int().min(1).max(1000).default(8),
  /** Delivery jobs a worker holds at once (AMQP prefetch of the delivery queue). */
  WEBHOOK_PREFETCH: z.coerce.number().int().min(1).max(1000).default(64),
  /**
   * A job whose subscription is at its concurrency limit waits this long before it is offered again;
   * each further park of the same job doubles it, up to 32× (so at most 24d / 32: what a timer and a
   * RabbitMQ message delay can wait).
   */
  WEBHOOK_BUSY_DELAY_MS: z.coerce.number().int().min(1).max(MAX_RETRY_DELAY_MS / 32).default(1000),
  /** Re-enqueues pending deliveries whose next attempt is overdue by WEBHOOK_SWEEP_GRACE_MS (0 disables). */
  WEBHOOK_SWEEP_INTERVAL_MS: z.coerce.number().int().min(0).default(60000),
  WEBHOOK_SWEEP_GRACE_MS: z.coerce.number().int().min(0).default(300000),
  /** Ended deliveries (delivered, failed, dead) and their attempts are deleted this long after they ended (0: kept). */
  WEBHOOK_DELIVERY_RETENTION_DAYS: z.coerce.number().int().min(0).max(3650).default(30),
};

export type WebhooksConfig = z.infer<z.ZodObject<typeof webhooksConfigShape>>;
