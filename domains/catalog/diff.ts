/**
 * The change between a stored row and a proposed one, as events report it (`changes` of
 * `model.updated`). Used by synchronisation and by the admin patches of providers and models.
 */
/** Fields of `next` that differ from `current` and are not in `manual`: {field: {old, new}}. */
export function diff<T extends Record<string, unknown>>(current: T, next: Partial<T>, manual: string[] = []) {
  const changes: Record<string, { old: unknown; new: unknown }> = {};
  for (const [key, value] of Object.entries(next)) {
    if (manual.includes(key) || value === undefined) continue;
    if (!sameJson(current[key], value)) changes[key] = { old: current[key] ?? null, new: value };
  }
  return changes;
}

/**
 * Whether two values hold the same JSON: objects compare by their keys whatever their order
 * (a jsonb column hands keys back in its own order, not in the order they were written), arrays
 * element by element; null, undefined and an object key whose value is undefined all count as
 * absent, as they do once stored.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || a === undefined || b === null || b === undefined) return (a ?? null) === (b ?? null);
  if (typeof a !== 'object' || typeof b !== 'object') return false;
  if (hasToJson(a) || hasToJson(b)) return JSON.stringify(a) === JSON.stringify(b);
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false;
    return true;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left).filter((k) => left[k] !== undefined);
  if (keys.length !== Object.keys(right).filter((k) => right[k] !== undefined).length) return false;
  for (const key of keys) {
    if (!Object.prototype.hasOwnProperty.call(right, key) || !sameJson(left[key], right[key])) return false;
  }
  return true;
}

function hasToJson(value: object): boolean {
  return typeof (value as { toJSON?: unknown }).toJSON === 'function';
}
