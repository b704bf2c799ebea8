import type { UpstreamModel } from './model-list.js';

/**
 * One entry of a provider's `GET /models`, checked before synchronisation stores it. A provider's
 * list is not ours: an entry the catalog cannot hold (a name longer than its column, a `created`
 * that is not a time, text the database refuses) is skipped with a reason naming the field, and
 * the provider's other models are synchronised as usual. What is harmless is normalised instead:
 * a fractional `created` is rounded down to whole seconds; `null` counts as absent; numbers that
 * are not usable limits (below 1 token, or beyond what a JSON number can say) are ignored, as
 * numbers of the wrong type always were, and a fractional limit is rounded down.
 */

/** Column limits of the catalog tables (models-migrations.ts). */
const MAX_ID = 300;
const MAX_NAME = 300;
const MAX_OWNED_BY = 200;
/** Largest `created` stored: 9999-12-31, far beyond any real model and well inside bigint. */
const MAX_CREATED = 253_402_300_799;
/**
 * Deepest `architecture` kept (real ones are two levels deep). JSON.parse reads any depth, but the
 * walks that follow (the NUL check, JSON.stringify into jsonb) recurse and overflow the stack a few
 * thousand levels down, which failed the whole provider's sync instead of skipping the one entry.
 */
const MAX_DEPTH = 32;

export interface SkippedModel {
  /** The entry's id, or null when the id itself is what is wrong. */
  model_id: string | null;
  error: string;
}

export type CheckedEntry = { model: UpstreamModel; skipped?: undefined } | { model?: undefined; skipped: SkippedModel };

// PostgreSQL text (and jsonb strings) cannot hold U+0000; an id is also a URL path segment.
const CONTROL = /[\u0000-\u001f\u007f]/;
const NUL = /\u0000/;

export function checkUpstreamEntry(raw: unknown, index: number): CheckedEntry {
  if (!isPlainObject(raw)) return skip(null, `the entry at index ${index} is not an object`);
  const id = raw.id;
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID || CONTROL.test(id)) {
    return skip(null, `the entry at index ${index} has no usable id (a string of 1 to ${MAX_ID} characters, no control characters)`);
  }
  // A browser resolves `.` and `..` path segments away: an id made of them would address another
  // resource in every URL that carries it (`../../providers/x` in /v1/admin/models/catalogs/…).
  if (id.split('/').some((segment) => segment === '.' || segment === '..')) {
    return skip(null, `the entry at index ${index} has no usable id (it has a "." or ".." path segment)`);
  }
  const fail = (reason: string) => skip(id, `model '${id}' skipped: ${reason}`);

  const name = optionalText(raw.name, MAX_NAME);
  if (name === INVALID) return fail(`name must be a string of at most ${MAX_NAME} characters without NUL`);
  const ownedBy = optionalText(raw.owned_by, MAX_OWNED_BY);
  if (ownedBy === INVALID) return fail(`owned_by must be a string of at most ${MAX_OWNED_BY} characters without NUL`);
  const description = optionalText(raw.description, Infinity);
  if (description === INVALID) return fail('description must be a string without NUL');

  let created: number | undefined;
  if (typeof raw.created === 'number') {
    if (!Number.isFinite(raw.created) || raw.created < 0 || raw.created > MAX_CREATED) return fail('created must be a Unix time in seconds');
    created = Math.floor(raw.created);
  }

  let architecture: Record<string, unknown> | undefined;
  if (raw.architecture !== undefined && raw.architecture !== null) {
    if (!isPlainObject(raw.architecture)) return fail('architecture must be an object');
    if (nestedDeeperThan(raw.architecture, MAX_DEPTH)) return fail(`architecture must not be nested more than ${MAX_DEPTH} levels deep`);
    if (holdsNul(raw.architecture)) return fail('architecture must not contain NUL');
    architecture = raw.architecture;
  }

  const model: UpstreamModel = { id };
  if (name !== undefined) model.name = name;
  if (ownedBy !== undefined) model.owned_by = ownedBy;
  if (description !== undefined) model.description = description;
  if (created !== undefined) model.created = created;
  if (architecture !== undefined) model.architecture = architecture;
  const contextLength = limit(raw.context_length);
  if (contextLength !== undefined) model.context_length = contextLength;
  const maxModelLen = limit(raw.max_model_len);
  if (maxModelLen !== undefined) model.max_model_len = maxModelLen;
  if (Array.isArray(raw.supported_parameters)) {
    model.supported_parameters = raw.supported_parameters.filter((p): p is string => typeof p === 'string' && !NUL.test(p));
  }
  if (isPlainObject(raw.top_provider)) {
    const top: NonNullable<UpstreamModel['top_provider']> = {};
    const topContext = limit(raw.top_provider.context_length);
    if (topContext !== undefined) top.context_length = topContext;
    const maxCompletion = limit(raw.top_provider.max_completion_tokens);
    if (maxCompletion !== undefined) top.max_completion_tokens = maxCompletion;
    model.top_provider = top;
  }
  return { model };
}

const INVALID = Symbol('invalid');

function optionalText(value: unknown, max: number): string | undefined | typeof INVALID {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string' || value.length > max || NUL.test(value)) return INVALID;
  return value;
}

/**
 * A token or context limit: a whole number of tokens, at least 1 (a fraction is rounded down), else
 * ignored. Some servers say 0 for "unknown": taken at its word, a context window of 0 would drop a
 * conversation's whole history from every request and show clients `context_length: 0`.
 */
function limit(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 1 ? Math.floor(value) : undefined;
}

/** Whether `value` holds arrays or objects more than `max` levels deep; iterative, so any depth is safe to ask about. */
function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [current, depth] = stack.pop()!;
    if (typeof current !== 'object' || current === null) continue;
    if (depth > max) return true;
    for (const inner of Array.isArray(current) ? current : Object.values(current)) stack.push([inner, depth + 1]);
  }
  return false;
}

function holdsNul(value: unknown): boolean {
  if (typeof value === 'string') return NUL.test(value);
  if (Array.isArray(value)) return value.some(holdsNul);
  if (isPlainObject(value)) return Object.entries(value).some(([key, inner]) => NUL.test(key) || holdsNul(inner));
  return false;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function skip(modelId: string | null, error: string): CheckedEntry {
  return { skipped: { model_id: modelId, error } };
}
