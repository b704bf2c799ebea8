import type { z } from 'zod';

/**
 * Configuration is read once at start from the environment and validated with zod. A missing or
 * malformed setting stops the process with one line naming the variable (see `exitOnConfigError`).
 * Every variable is documented in README.md.
 *
 * This loader needs zod's types only: the schemas come from the caller (kit/settings builds the
 * shared ones), so kit/core, which re-exports it, loads without zod.
 */

const UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 * 1024 };

/** `10mb` → bytes (size settings such as JSON_BODY_LIMIT). */
export function parseSize(size: string): number {
  const match = /^(\d+)(b|kb|mb)$/i.exec(size);
  if (!match) throw new Error(`bad size ${size}`);
  return Number(match[1]) * UNITS[match[2]!.toLowerCase()]!;
}

export type ConfigShape = Record<string, z.ZodType>;

export class ConfigError extends Error {
  constructor(readonly variable: string, detail: string) {
    super(`invalid configuration: ${variable}: ${detail}`);
    this.name = 'ConfigError';
  }
}

/** Parses `env` against `shape`; throws ConfigError naming the first bad variable. */
/**
 * The longest delay a Node timer waits (2^31-1 ms, about 24.8 days). A longer one fires after 1 ms,
 * so an interval set past it would run its job non-stop and a timeout past it would end every
 * wait at once: every `*_MS` setting is refused above it.
 */
export const MAX_TIMER_MS = 2_147_483_647;

export function loadConfig<S extends ConfigShape>(
  shape: S,
  env: NodeJS.ProcessEnv = process.env,
): z.infer<z.ZodObject<S>> {
  const input: Record<string, string | undefined> = {};
  for (const key of Object.keys(shape)) {
    const value = env[key];
    // An empty variable means "unset" (common in compose files and CI matrices).
    input[key] = value === '' ? undefined : value;
  }
  // Each variable on its own, in the shape's order: the first bad one is reported, as an object
  // schema over the whole shape would (without building one, which would need zod loaded here).
  const output: Record<string, unknown> = {};
  for (const [variable, schema] of Object.entries(shape)) {
    const raw = input[variable];
    const result = schema.safeParse(raw);
    if (!result.success) {
      const message = result.error.issues[0]!.message;
      const detail = raw === undefined ? `${message} (variable is not set)` : `${message} (got "${redact(variable, raw)}")`;
      throw new ConfigError(variable, detail);
    }
    if (variable.endsWith('_MS') && typeof result.data === 'number' && result.data > MAX_TIMER_MS) {
      throw new ConfigError(variable, `must be at most ${MAX_TIMER_MS} ms, about 24.8 days (got "${raw}")`);
    }
    output[variable] = result.data;
  }
  return output as z.infer<z.ZodObject<S>>;
}

function redact(variable: string, value: string): string {
  return /SECRET|KEY|PASSWORD|TOKEN|URL/.test(variable) ? '<redacted>' : value.slice(0, 80);
}

/** Prints the one-line reason and exits 1; used by every main.ts. */
export function exitOnConfigError(error: unknown): never {
  if (error instanceof ConfigError) {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
  throw error;
}
