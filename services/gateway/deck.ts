import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

/**
 * The decK file (deck/kong.yaml), read the way decK reads it: `${{ env "DECK_…" }}` placeholders
 * rendered first (optionally piped through toInt / toBool / toFloat; comment lines are left
 * alone; an unset variable is an error), then YAML. Only the entities the embedded gateway serves
 * are modelled; anything else it cannot honour is refused at start rather than ignored.
 */
export interface DeckPlugin {
  name: string;
  config?: Record<string, unknown>;
  enabled?: boolean;
  route?: string;
  service?: string;
  consumer?: string;
  protocols?: string[];
  tags?: string[];
}

export interface DeckRoute {
  name: string;
  paths?: string[];
  methods?: string[];
  hosts?: string[];
  headers?: Record<string, string[]>;
  strip_path?: boolean;
  preserve_host?: boolean;
  regex_priority?: number;
  path_handling?: 'v0' | 'v1';
  protocols?: string[];
  plugins?: DeckPlugin[];
  tags?: string[];
}

export interface DeckService {
  name: string;
  url?: string;
  protocol?: string;
  host?: string;
  port?: number;
  path?: string;
  connect_timeout?: number;
  read_timeout?: number;
  write_timeout?: number;
  retries?: number;
  routes?: DeckRoute[];
  plugins?: DeckPlugin[];
  tags?: string[];
}

export interface DeckConsumer {
  username: string;
  custom_id?: string;
  plugins?: DeckPlugin[];
  tags?: string[];
  [credential: string]: unknown;
}

export interface DeckFile {
  _format_version: string;
  services?: DeckService[];
  routes?: DeckRoute[];
  plugins?: DeckPlugin[];
  consumers?: DeckConsumer[];
  [key: string]: unknown;
}

const PLACEHOLDER = /\$\{\{\s*env\s+"([A-Za-z0-9_]+)"\s*(?:\|\s*(toInt|toBool|toFloat)\s*)?\}\}/g;

export class DeckError extends Error {
  constructor(message: string) {
    super(`deck: ${message}`);
    this.name = 'DeckError';
  }
}

/** Renders the env placeholders of a decK file (decK ≥ 1.7 semantics: DECK_ prefix, unset is an error). */
export function renderDeck(text: string, vars: Record<string, string | undefined>): string {
  return text
    .split('\n')
    .map((line) => {
      if (line.trimStart().startsWith('#')) return line;
      return line.replace(PLACEHOLDER, (_all, name: string, fn: string | undefined) => {
        if (!name.startsWith('DECK_')) throw new DeckError(`environment variable ${name} must start with DECK_`);
        const value = vars[name];
        if (value === undefined) throw new DeckError(`environment variable ${name} is not set`);
        if (fn === 'toInt' && !/^-?\d+$/.test(value)) throw new DeckError(`${name}="${value}" is not an integer`);
        if (fn === 'toFloat' && !Number.isFinite(Number(value))) throw new DeckError(`${name}="${value}" is not a number`);
        if (fn === 'toBool' && !/^(true|false)$/.test(value)) throw new DeckError(`${name}="${value}" is not a boolean`);
        return value;
      });
    })
    .join('\n');
}

export function parseDeck(text: string, vars: Record<string, string | undefined>): DeckFile {
  let doc: DeckFile;
  try {
    doc = parse(renderDeck(text, vars)) as DeckFile;
  } catch (error) {
    if (error instanceof DeckError) throw error;
    // The parser's first line says what and where; the rest quotes the rendered file, which may hold a DECK_ secret.
    throw new DeckError(`not valid YAML: ${(error as Error).message.split('\n')[0]!.replace(/:$/, '')}`);
  }
  if (!doc || typeof doc !== 'object') throw new DeckError('not a YAML mapping');
  if (doc._format_version !== '3.0') throw new DeckError(`_format_version must be "3.0" (got ${String(doc._format_version)})`);
  checkEntities(doc);
  return doc;
}

/**
 * The shape of the entities the embedded gateway reads, checked as decK checks them before Kong
 * sees them, so a mistake stops the start naming the entity and the field rather than changing
 * what is served: a `paths: /v1` (a string) would otherwise be three paths, `/` among them (a
 * catch-all route); a plugin naming a route that does not exist would apply nowhere (an auth plugin
 * silently off); a second service of the same name would send the first one's routes to its URL.
 */
function checkEntities(doc: DeckFile): void {
  const list = (value: unknown, where: string): unknown[] => {
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value)) throw new DeckError(`${where} must be a list`);
    return value;
  };
  const record = (value: unknown, where: string): Record<string, unknown> => {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new DeckError(`${where} must be a mapping`);
    return value as Record<string, unknown>;
  };
  const name = (entity: Record<string, unknown>, field: string, where: string, seen: Set<string>): string => {
    const value = entity[field];
    if (typeof value !== 'string' || value === '') throw new DeckError(`${where}: ${field} must be a non-empty string`);
    if (seen.has(value)) throw new DeckError(`${where}: ${field} "${value}" is used twice (names are unique in Kong)`);
    seen.add(value);
    return value;
  };
  const optional = (entity: Record<string, unknown>, field: string, type: 'boolean' | 'integer' | 'string', where: string) => {
    const value = entity[field];
    if (value === undefined) return;
    const ok = type === 'integer' ? Number.isInteger(value) : typeof value === type;
    if (!ok) throw new DeckError(`${where}: ${field} must be ${type === 'integer' ? 'an integer' : `a ${type}`}`);
  };
  const strings = (entity: Record<string, unknown>, field: string, where: string): string[] => {
    const values = list(entity[field], `${where}: ${field}`);
    for (const value of values) if (typeof value !== 'string') throw new DeckError(`${where}: ${field} must be a list of strings`);
    return values as string[];
  };

  const serviceNames = new Set<string>();
  const routeNames = new Set<string>();
  const consumerNames = new Set<string>();
  /** What a nested plugin's entity is: the scope fields it may only repeat, never change. */
  type Parents = Partial<Record<'route' | 'service' | 'consumer', string>>;
  const plugins: Array<{ plugin: Record<string, unknown>; where: string; parents: Parents }> = [];
  const pluginsOf = (entity: Record<string, unknown>, where: string, parents: Parents = {}) =>
    list(entity.plugins, `${where}: plugins`).forEach((p, i) => plugins.push({ plugin: record(p, `${where}: plugins[${i}]`), where, parents }));

  list(doc.services, 'services').forEach((s, i) => {
    const service = record(s, `services[${i}]`);
    const serviceName = name(service, 'name', `services[${i}]`, serviceNames);
    const serviceWhere = `service ${serviceName}`;
    for (const field of ['url', 'protocol', 'host', 'path'] as const) optional(service, field, 'string', serviceWhere);
    optional(service, 'port', 'integer', serviceWhere);
    // Milliseconds, as decK defines them (Kong: 1 to 2^31 - 2); the edge's proxy acts on them.
    for (const field of ['connect_timeout', 'read_timeout', 'write_timeout'] as const) {
      optional(service, field, 'integer', serviceWhere);
      const value = service[field] as number | undefined;
      if (value !== undefined && (value < 1 || value > 2 ** 31 - 2)) throw new DeckError(`${serviceWhere}: ${field} must be between 1 and ${2 ** 31 - 2} (milliseconds)`);
    }
    try {
      serviceTarget(service as unknown as DeckService);
    } catch (error) {
      if (error instanceof DeckError) throw error;
      throw new DeckError(`${serviceWhere}: ${service.url !== undefined ? 'url is not a valid URL' : 'protocol, host, port and path do not form a valid URL'}`);
    }
    pluginsOf(service, serviceWhere, { service: serviceName });
    list(service.routes, `${serviceWhere}: routes`).forEach((r, j) => {
      const route = record(r, `${serviceWhere}: routes[${j}]`);
      const routeName = name(route, 'name', `${serviceWhere}: routes[${j}]`, routeNames);
      const where = `route ${routeName}`;
      const paths = strings(route, 'paths', where);
      // Kong matches a route without paths on its other attributes; the embedded gateway routes by path only.
      if (paths.length === 0) throw new DeckError(`${where}: paths must list at least one path (the embedded gateway routes by path)`);
      for (const path of paths) {
        if (!path.startsWith('/') && !path.startsWith('~')) throw new DeckError(`${where}: paths entry "${path}" must start with / (prefix) or ~ (regex)`);
      }
      strings(route, 'methods', where);
      optional(route, 'strip_path', 'boolean', where);
      optional(route, 'preserve_host', 'boolean', where);
      optional(route, 'regex_priority', 'integer', where);
      pluginsOf(route, where, { route: routeName, service: serviceName });
    });
  });
  const topRoutes = list(doc.routes, 'routes');
  if (topRoutes.length > 0) {
    const first = (topRoutes[0] as { name?: unknown } | null)?.name;
    throw new DeckError(`routes: top-level routes are not supported by the embedded gateway; nest ${typeof first === 'string' ? `route ${first}` : 'each route'} under its service`);
  }
  list(doc.consumers, 'consumers').forEach((c, i) => {
    const consumer = record(c, `consumers[${i}]`);
    const username = name(consumer, 'username', `consumers[${i}]`, consumerNames);
    pluginsOf(consumer, `consumer ${username}`, { consumer: username });
  });
  pluginsOf(doc, 'plugins');

  for (const { plugin, where, parents } of plugins) {
    if (typeof plugin.name !== 'string' || plugin.name === '') throw new DeckError(`${where}: every plugin needs a name`);
    const at = `${where === 'plugins' ? 'plugin' : `${where}: plugin`} ${plugin.name}`;
    optional(plugin, 'enabled', 'boolean', at);
    if (plugin.config !== undefined) record(plugin.config, `${at}: config`);
    // A plugin nested under an entity may name the other parts of its scope (a route's plugin for
    // one consumer); each must exist, or the plugin would apply nowhere.
    const refs = { route: routeNames, service: serviceNames, consumer: consumerNames } as const;
    for (const field of ['route', 'service', 'consumer'] as const) {
      const ref = plugin[field];
      if (ref === undefined) continue;
      if (typeof ref !== 'string' || !refs[field].has(ref)) throw new DeckError(`${at}: ${field} "${String(ref)}" names no ${field} of this file`);
      // decK refuses a nested plugin that names another entity than the one it is nested under
      // (the nesting would otherwise win, silently scoping the plugin elsewhere than it says).
      const parent = parents[field];
      if (parent !== undefined && ref !== parent) throw new DeckError(`${at}: ${field} "${ref}" is not the ${field} it is nested under (${parent})`);
    }
  }
}

export function loadDeck(file: string, vars: Record<string, string | undefined>): DeckFile {
  return parseDeck(readFileSync(file, 'utf8'), vars);
}

/** Upstream origin and base path of a service (`url`, or protocol/host/port/path). */
export function serviceTarget(service: DeckService): { origin: string; path: string } {
  const url = service.url
    ? new URL(service.url)
    : new URL(`${service.protocol ?? 'http'}://${service.host ?? '127.0.0.1'}:${service.port ?? 80}${service.path ?? ''}`);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new DeckError(`service ${service.name}: protocol ${url.protocol} is not supported`);
  return { origin: url.origin, path: url.pathname || '/' };
}
