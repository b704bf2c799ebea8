/**
 * Kong plugin schemas (the `Schema` a kong-js-pluginserver plugin exports, same syntax as Lua
 * `fields`), and a validator that applies their defaults. The embedded gateway configures every
 * core through the same Schema Kong validates, so one decK `config` means the same in both hosts.
 */

export interface KongField {
  type: 'string' | 'integer' | 'number' | 'boolean' | 'array' | 'set' | 'map' | 'record';
  required?: boolean;
  default?: unknown;
  one_of?: unknown[];
  between?: [number, number];
  len_min?: number;
  elements?: KongField;
  keys?: KongField;
  values?: KongField;
  fields?: KongFieldEntry[];
  referenceable?: boolean;
  encrypted?: boolean;
}

/** One entry of a `fields` array: `{ name: definition }`. */
export type KongFieldEntry = Record<string, KongField>;

export class SchemaError extends Error {
  constructor(readonly path: string, detail: string) {
    super(`${path}: ${detail}`);
    this.name = 'SchemaError';
  }
}

/** Validates `input` against `fields`, fills defaults, drops Kong's bookkeeping keys (`__seq__`, `__plugin_id`). */
export function applySchema(fields: KongFieldEntry[], input: unknown, path = 'config'): Record<string, unknown> {
  const source = input ?? {};
  if (typeof source !== 'object' || Array.isArray(source)) throw new SchemaError(path, 'expected a record');
  const known = new Set<string>();
  const out: Record<string, unknown> = {};
  for (const entry of fields) {
    for (const [name, field] of Object.entries(entry)) {
      known.add(name);
      const value = (source as Record<string, unknown>)[name];
      const checked = checkValue(field, value, `${path}.${name}`);
      if (checked !== undefined) out[name] = checked;
    }
  }
  for (const key of Object.keys(source)) {
    if (key.startsWith('__')) continue;
    if (!known.has(key)) throw new SchemaError(`${path}.${key}`, 'unknown field');
  }
  return out;
}

function checkValue(field: KongField, value: unknown, path: string): unknown {
  if (value === undefined || value === null) {
    if (field.default !== undefined) return structuredClone(field.default);
    if (field.type === 'record') return applySchema(field.fields ?? [], {}, path);
    if (field.required) throw new SchemaError(path, 'required field missing');
    return undefined;
  }
  switch (field.type) {
    case 'string': {
      if (typeof value !== 'string') throw new SchemaError(path, 'expected a string');
      // Kong refuses the empty string unless the field says otherwise ("empty strings are not
      // accepted by default": kong/db/schema/init.lua gives a string field without len_min one of 1).
      const lenMin = field.len_min ?? 1;
      if (value.length < lenMin) throw new SchemaError(path, `length must be at least ${lenMin}`);
      break;
    }
    case 'integer':
      if (typeof value !== 'number' || !Number.isInteger(value)) throw new SchemaError(path, 'expected an integer');
      break;
    case 'number':
      if (typeof value !== 'number' || !Number.isFinite(value)) throw new SchemaError(path, 'expected a number');
      break;
    case 'boolean':
      if (typeof value !== 'boolean') throw new SchemaError(path, 'expected a boolean');
      break;
    case 'array':
    case 'set': {
      if (!Array.isArray(value)) throw new SchemaError(path, `expected an ${field.type === 'set' ? 'set' : 'array'}`);
      const items = value.map((item, i) => checkValue(field.elements ?? { type: 'string' }, item, `${path}[${i}]`));
      return field.type === 'set' ? [...new Set(items)] : items;
    }
    case 'map': {
      if (typeof value !== 'object' || Array.isArray(value)) throw new SchemaError(path, 'expected a map');
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        checkValue(field.keys ?? { type: 'string' }, k, `${path}.<key>`);
        out[k] = checkValue(field.values ?? { type: 'string' }, v, `${path}.${k}`);
      }
      return out;
    }
    case 'record':
      return applySchema(field.fields ?? [], value, path);
  }
  if (field.one_of && !field.one_of.includes(value)) throw new SchemaError(path, `expected one of ${field.one_of.join(', ')}`);
  if (field.between && ((value as number) < field.between[0] || (value as number) > field.between[1])) {
    throw new SchemaError(path, `must be between ${field.between[0]} and ${field.between[1]}`);
  }
  return value;
}
