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
  const doc = parse(renderDeck(text, vars)) as DeckFile;
  if (!doc || typeof doc !== 'object') throw new DeckError('not a YAML mapping');
  if (doc._format_version !== '3.0') throw new DeckError(`_format_version must be "3.0" (got ${String(doc._format_version)})`);
  return doc;
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
