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
  /**
   * A Lua pattern the string must match somewhere (Kong's `match` validator, `value:match(pattern)`;
   * anchor it with `^`/`$`). Kong checks it when the configuration is written (decK sync, the Admin
   * API); `applySchema` checks it the same way for the embedded gateway (`luaPattern`).
   */
  match?: string;
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

/**
 * The `match` of a field holding an http(s) URL (a JWKS, a key validator): scheme, `://`, then a
 * host. Kong refuses anything else when the configuration is written; `checkHttpUrl` adds what a Lua
 * pattern cannot say (a URL Node can parse).
 */
export const HTTP_URL_MATCH = '^[Hh][Tt][Tt][Pp][Ss]?://[^%s/]';

/** `config[name]`, checked to be an http(s) URL Node can parse; a SchemaError naming the field otherwise. */
export function checkHttpUrl(config: Record<string, unknown>, name: string): void {
  const value = config[name];
  if (typeof value !== 'string') return;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new SchemaError(`config.${name}`, 'expected an http(s) URL');
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') throw new SchemaError(`config.${name}`, 'expected an http(s) URL');
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
      if (field.match !== undefined && !luaPattern(field.match).test(value)) throw new SchemaError(path, `must match ${field.match}`);
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
      if (field.len_min !== undefined && value.length < field.len_min) throw new SchemaError(path, `must hold at least ${field.len_min} element${field.len_min === 1 ? '' : 's'}`);
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

/** Lua's character classes (`%a`…) as the contents of a JavaScript character set (C locale, ASCII). */
const LUA_CLASSES: Record<string, string> = {
  a: 'A-Za-z',
  c: '\\x00-\\x1f\\x7f',
  d: '0-9',
  l: 'a-z',
  p: '!-\\/:-@\\[-`{-~',
  s: '\\t\\n\\v\\f\\r ',
  u: 'A-Z',
  w: 'A-Za-z0-9',
  x: '0-9A-Fa-f',
};
const patterns = new Map<string, RegExp>();

/**
 * A Lua pattern (Kong's `match`) as the JavaScript regular expression that matches the same
 * strings, for the subset with an exact equivalent: anchors, `.`, classes (`%d`, `%s`, … and their
 * upper-case complements), escapes (`%/`), sets (`[^%s/]`, ranges), and the greedy `?`, `*`, `+`, in
 * ASCII. Anything else (`-` repetition, `%b`, `%f`, captures, back references) throws: a pattern read
 * differently here than by Kong would make one decK file mean two things.
 */
export function luaPattern(pattern: string): RegExp {
  const known = patterns.get(pattern);
  if (known) return known;
  const unsupported = () => new SchemaError('match', `unsupported Lua pattern ${JSON.stringify(pattern)}`);
  // Lua matches bytes, JavaScript UTF-16 units: the same only for ASCII in the pattern.
  const escape = (c: string) => {
    if (c.charCodeAt(0) > 0x7f) throw unsupported();
    return /[A-Za-z0-9]/.test(c) ? c : `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;
  };
  let source = '';
  let i = 0;
  if (pattern.startsWith('^')) {
    source += '^';
    i = 1;
  }
  let canRepeat = false;
  while (i < pattern.length) {
    const c = pattern[i]!;
    if (c === '$' && i === pattern.length - 1) {
      source += '$';
      i++;
      canRepeat = false;
    } else if (c === '?' || c === '*' || c === '+') {
      if (!canRepeat) throw unsupported();
      source += c;
      i++;
      canRepeat = false;
    } else if (c === '-' || c === '(' || c === ')') {
      throw unsupported();
    } else if (c === '.') {
      source += '[\\s\\S]';
      i++;
      canRepeat = true;
    } else if (c === '%') {
      const next = pattern[i + 1];
      if (next === undefined) throw unsupported();
      const lower = next.toLowerCase();
      if (LUA_CLASSES[lower] !== undefined) source += `[${next === lower ? '' : '^'}${LUA_CLASSES[lower]}]`;
      else if (/[A-Za-z0-9]/.test(next)) throw unsupported();
      else source += escape(next);
      i += 2;
      canRepeat = true;
    } else if (c === '[') {
      let j = i + 1;
      let set = '[';
      if (pattern[j] === '^') {
        set += '^';
        j++;
      }
      let first = true;
      while (j < pattern.length && (pattern[j] !== ']' || first)) {
        first = false;
        const d = pattern[j]!;
        if (d === '%') {
          const next = pattern[j + 1];
          if (next === undefined) throw unsupported();
          if (LUA_CLASSES[next] !== undefined) set += LUA_CLASSES[next];
          else if (/[A-Za-z0-9]/.test(next)) throw unsupported();
          else set += escape(next);
          j += 2;
        } else if (pattern[j + 1] === '-' && pattern[j + 2] !== undefined && pattern[j + 2] !== ']') {
          set += `${escape(d)}-${escape(pattern[j + 2]!)}`;
          j += 3;
        } else {
          set += escape(d);
          j++;
        }
      }
      if (j >= pattern.length) throw unsupported();
      source += `${set}]`;
      i = j + 1;
      canRepeat = true;
    } else {
      source += escape(c);
      i++;
      canRepeat = true;
    }
  }
  const regexp = new RegExp(source);
  patterns.set(pattern, regexp);
  return regexp;
}
