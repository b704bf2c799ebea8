/**
 * The change between a stored row and a proposed one, as events report it (`changes` of
 * `model.updated`). Used by synchronisation and by the admin patches of providers and models.
 */
/** Fields of `next` that differ from `current` and are not in `manual`: {field: {old, new}}. */
export function diff<T extends Record<string, unknown>>(current: T, next: Partial<T>, manual: string[] = []) {
  const changes: Record<string, { old: unknown; new: unknown }> = {};
  for (const [key, value] of Object.entries(next)) {
    if (manual.includes(key) || value === undefined) continue;
    if (JSON.stringify(current[key] ?? null) !== JSON.stringify(value ?? null)) changes[key] = { old: current[key] ?? null, new: value };
  }
  return changes;
}

