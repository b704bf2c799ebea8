import type { DeckFile, DeckRoute, DeckService } from './deck.js';
import { DeckError } from './deck.js';

/**
 * Kong's router (traditional_compatible flavour) for the features deck/kong.yaml uses: prefix
 * paths and `~` regex paths (anchored at the start), methods, `regex_priority`, `strip_path`
 * (path_handling v0). Order, as Kong computes it per path: routes with more matching attributes
 * (methods, hosts, headers) first, then regex paths before prefix paths, regex paths by
 * `regex_priority` (higher first), prefix paths by length (longer first), then file order.
 * Paths are normalised first like Kong does: percent-encoded unreserved characters decoded
 * (reserved ones such as %2F stay encoded and never match a `/`), dot segments removed, repeated
 * slashes merged.
 */
export interface RouteMatch {
  route: DeckRoute;
  service: DeckService;
  /** The path sent upstream (service path + remainder), without the query string. */
  upstreamPath: string;
  /**
   * The path prefix the route stripped (`strip_path`), which Kong sends as `X-Forwarded-Prefix`;
   * null when nothing (or only `/`) was stripped.
   */
  strippedPrefix: string | null;
}

interface CompiledPath {
  route: DeckRoute;
  service: DeckService;
  servicePath: string;
  methods: Set<string> | null;
  regex: RegExp | null;
  prefix: string | null;
  points: number;
  regexPriority: number;
  length: number;
  order: number;
}

export function createRouter(deck: DeckFile, servicePath: (service: DeckService) => string) {
  const compiled: CompiledPath[] = [];
  let order = 0;
  for (const service of deck.services ?? []) {
    for (const route of service.routes ?? []) {
      if (route.hosts?.length || (route.headers && Object.keys(route.headers).length)) {
        throw new DeckError(`route ${route.name}: hosts and headers matching are not supported by the embedded gateway`);
      }
      if (route.path_handling && route.path_handling !== 'v0') throw new DeckError(`route ${route.name}: only path_handling v0 is supported`);
      const methods = route.methods?.length ? new Set(route.methods.map((m) => m.toUpperCase())) : null;
      const points = methods ? 1 : 0;
      for (const path of route.paths ?? []) {
        const isRegex = path.startsWith('~');
        compiled.push({
          route,
          service,
          servicePath: servicePath(service),
          methods,
          regex: isRegex ? compileRegexPath(path.slice(1), route.name) : null,
          prefix: isRegex ? null : path,
          points,
          regexPriority: route.regex_priority ?? 0,
          length: path.length,
          order: order++,
        });
      }
    }
  }
  compiled.sort(
    (a, b) =>
      b.points - a.points ||
      Number(b.regex !== null) - Number(a.regex !== null) ||
      (a.regex && b.regex ? b.regexPriority - a.regexPriority : 0) ||
      (!a.regex && !b.regex ? b.length - a.length : 0) ||
      a.order - b.order,
  );

  function match(method: string, rawPath: string): RouteMatch | null {
    const path = normalizePath(rawPath);
    if (path === null) return null;
    for (const c of compiled) {
      if (c.methods && !c.methods.has(method)) continue;
      let matched: string | null = null;
      if (c.regex) {
        const m = c.regex.exec(path);
        if (m) matched = m[0];
      } else if (path.startsWith(c.prefix!)) {
        matched = c.prefix!;
      }
      if (matched === null) continue;
      const strip = c.route.strip_path ?? true;
      const upstreamPath = strip ? joinV0(c.servicePath, path.slice(matched.length)) : joinPlain(c.servicePath, path);
      return { route: c.route, service: c.service, upstreamPath, strippedPrefix: strip && matched !== '' && matched !== '/' ? matched : null };
    }
    return null;
  }

  /**
   * Called when `match` found nothing: the methods of the routes whose path matches, so the edge
   * answers 405 with `Allow` (as the services do) instead of 404 for a path it does serve. Null
   * when no route has the path; a route without methods never reaches here (it would have matched).
   */
  function allowedMethods(rawPath: string): string[] | null {
    const path = normalizePath(rawPath);
    if (path === null) return null;
    const allowed = new Set<string>();
    for (const c of compiled) {
      if (!c.methods) continue;
      if (c.regex ? c.regex.test(path) : path.startsWith(c.prefix!)) for (const m of c.methods) allowed.add(m);
    }
    return allowed.size ? [...allowed].sort() : null;
  }

  return { match, allowedMethods, size: compiled.length };
}

export type Router = ReturnType<typeof createRouter>;

/**
 * A Kong regex path, anchored at the start. A leading `(?i)` (PCRE and Kong's router accept it;
 * JavaScript has no inline flags) makes the whole path case-insensitive.
 */
function compileRegexPath(source: string, routeName: string): RegExp {
  const insensitive = source.startsWith('(?i)');
  try {
    return new RegExp(`^(?:${insensitive ? source.slice(4) : source})`, insensitive ? 'i' : '');
  } catch (error) {
    // A pattern JavaScript cannot compile (a typo, or PCRE syntax it lacks) names its route, as a deck error.
    throw new DeckError(`route ${routeName}: paths entry "~${source}" is not a regular expression the embedded gateway can use (${(error as Error).message})`);
  }
}

function joinV0(servicePath: string, rest: string): string {
  if (rest === '') return servicePath || '/';
  if (servicePath === '/' || servicePath === '') return rest.startsWith('/') ? rest : `/${rest}`;
  if (servicePath.endsWith('/') && rest.startsWith('/')) return servicePath + rest.slice(1);
  return servicePath + rest;
}

function joinPlain(servicePath: string, path: string): string {
  if (servicePath === '/' || servicePath === '') return path;
  return servicePath.replace(/\/+$/, '') + path;
}

const UNRESERVED = /%(2[DdEe]|3[0-9]|4[1-9A-Fa-f]|5[0-9Aa]|5[Ff]|6[1-9A-Fa-f]|7[0-9Aa]|7[Ee])/g;

/** Kong-style normalisation; null for a path that is not a valid origin-form path. */
export function normalizePath(raw: string): string | null {
  if (!raw.startsWith('/')) return null;
  let path = raw.replace(UNRESERVED, (enc) => String.fromCharCode(parseInt(enc.slice(1), 16)));
  path = path.replace(/%[0-9a-f]{2}/g, (enc) => enc.toUpperCase());
  path = path.replace(/\/{2,}/g, '/');
  if (path.includes('/.')) {
    const out: string[] = [];
    for (const segment of path.split('/').slice(1)) {
      if (segment === '.') continue;
      if (segment === '..') out.pop();
      else out.push(segment);
    }
    const trailing = /\/\.{1,2}$/.test(path) ? '/' : '';
    path = `/${out.join('/')}${trailing}`.replace(/\/{2,}/g, '/');
  }
  return path;
}
