import { CONTINUE, firstHeader, type Decision, type EdgeRequest, type PluginCore } from '../../../plugins/core/index.js';

/**
 * Kong's bundled `cors` plugin (priority 2000) for the embedded gateway, same config fields:
 * a preflight (OPTIONS with Access-Control-Request-Method) is answered here, before any
 * credential check; other requests from an allowed origin get the allow/expose headers.
 */
export const PRIORITY = 2000;
const ALL_METHODS = ['GET', 'HEAD', 'PUT', 'PATCH', 'POST', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT'];

export interface CorsConfig {
  origins?: string[];
  headers?: string[];
  exposed_headers?: string[];
  methods?: string[];
  max_age?: number;
  credentials?: boolean;
  preflight_continue?: boolean;
  private_network?: boolean;
}

export function createCors(config: CorsConfig): PluginCore {
  const origins = config.origins ?? [];
  const any = origins.includes('*');
  const patterns = origins.filter((o) => o !== '*').map((o) => (/^[\w.:/-]+$/.test(o) ? o : new RegExp(`^(?:${o})$`)));
  const methods = (config.methods ?? ALL_METHODS).join(',');
  const exposed = config.exposed_headers?.length ? config.exposed_headers.join(',') : null;
  const credentials = config.credentials === true;

  function allowOrigin(origin: string | undefined): string | null {
    if (any && !credentials) return '*';
    if (!origin) return null;
    if (any) return origin;
    return patterns.some((p) => (typeof p === 'string' ? p === origin : p.test(origin))) ? origin : null;
  }

  function access(request: EdgeRequest): Decision {
    const origin = firstHeader(request.headers, 'origin');
    if (origin === undefined && !any) return CONTINUE;
    const allowed = allowOrigin(origin);
    const headers: Record<string, string> = {};
    if (allowed) headers['Access-Control-Allow-Origin'] = allowed;
    if (allowed !== '*') headers.Vary = 'Origin';
    if (allowed && credentials) headers['Access-Control-Allow-Credentials'] = 'true';

    const requestedMethod = firstHeader(request.headers, 'access-control-request-method');
    if (request.method === 'OPTIONS' && requestedMethod !== undefined) {
      if (config.preflight_continue) return CONTINUE;
      const requestedHeaders = firstHeader(request.headers, 'access-control-request-headers');
      const allowHeaders = config.headers?.length ? config.headers.join(',') : requestedHeaders;
      if (allowHeaders) headers['Access-Control-Allow-Headers'] = allowHeaders;
      headers['Access-Control-Allow-Methods'] = methods;
      if (config.max_age !== undefined && config.max_age !== null) headers['Access-Control-Max-Age'] = String(config.max_age);
      return { kind: 'respond', status: 200, body: null, headers };
    }
    if (allowed && exposed) headers['Access-Control-Expose-Headers'] = exposed;
    return { kind: 'continue', responseHeaders: headers };
  }

  return { access };
}
