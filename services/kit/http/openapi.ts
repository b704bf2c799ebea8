import { z } from 'zod';
import type { Route, RouteAccess } from './route-table.js';

/**
 * The OpenAPI 3.1 document and the one-line-per-endpoint `docs/api.md`, generated from the same
 * route tables the kit mounts, with zod 4's JSON Schema output for bodies, queries and answers. So
 * a route cannot exist without being documented, and the document cannot describe a route that
 * does not exist. Internal routes (service to service, not forwarded by the edge) are listed in
 * api.md only.
 */
export interface DocumentedService {
  name: string;
  routes: readonly Route[];
  /** Prefixes every path is also served under (llm-api: `/llm`). */
  aliases?: string[];
}

export interface OpenApiInfo {
  title: string;
  version: string;
  description?: string;
}

type Json = Record<string, unknown>;

/** `/v1/projects/:projectId` → `/v1/projects/{projectId}`; a `*wildcard` (it may hold slashes) likewise. */
export function openApiPath(path: string): string {
  return path.replace(/[:*]([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}');
}

export function pathParamNames(path: string): string[] {
  return [...path.matchAll(/[:*]([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
}

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  const out = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Json;
  delete out.$schema;
  return out;
}

const ERROR_REF = { $ref: '#/components/schemas/Error' };
const errorResponse = (description: string) => ({ description, content: { 'application/json': { schema: ERROR_REF } } });

const ACCESS_LABEL: Record<RouteAccess, string> = { public: 'public', user: 'user', admin: 'admin', internal: 'internal' };
const SECURITY = [{ bearerAuth: [] }, { apiKeyAuth: [] }];

function operationId(route: Route): string {
  const words = openApiPath(route.path)
    .replace(/[{}]/g, '')
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean);
  return [route.method, ...words].map((w, i) => (i === 0 ? w : w[0]!.toUpperCase() + w.slice(1))).join('');
}

function parameters(route: Route): Json[] {
  const out: Json[] = [];
  const params = route.request?.params ? (jsonSchema(route.request.params, 'input').properties as Record<string, Json> | undefined) : undefined;
  for (const name of pathParamNames(route.path)) {
    const wildcard = route.path.includes(`*${name}`);
    out.push({
      name,
      in: 'path',
      required: true,
      schema: params?.[name] ?? { type: 'string' },
      ...(wildcard ? { description: 'May contain slashes (e.g. `org/model`).' } : {}),
    });
  }
  if (route.request?.query) {
    const query = jsonSchema(route.request.query, 'input');
    const required = new Set((query.required as string[] | undefined) ?? []);
    for (const [name, schema] of Object.entries((query.properties as Record<string, Json> | undefined) ?? {})) {
      out.push({ name, in: 'query', required: required.has(name), schema });
    }
  }
  return out;
}

function operation(service: DocumentedService, route: Route): Json {
  const op: Json = {
    operationId: operationId(route),
    summary: route.summary,
    tags: [route.tag ?? service.name],
    'x-access': ACCESS_LABEL[route.access],
    security: route.access === 'public' ? [] : SECURITY,
  };
  const params = parameters(route);
  if (params.length) op.parameters = params;
  if (route.body === 'stream') {
    op.requestBody = { required: true, content: { [route.request?.contentType ?? 'application/octet-stream']: {} } };
  } else if (route.request?.body) {
    op.requestBody = { required: true, content: { 'application/json': { schema: jsonSchema(route.request.body, 'input') } } };
  }
  if (route.planned) {
    delete op.requestBody;
    op.responses = { '401': errorResponse('Missing or invalid credentials'), '501': errorResponse('Not built yet: answers 501 `not_implemented`') };
    return op;
  }
  const status = String(route.response?.status ?? 200);
  const answer: Json = { description: route.response?.description ?? route.summary };
  if (status !== '204') {
    const type = route.response?.contentType ?? 'application/json';
    answer.content = { [type]: route.response?.schema ? { schema: jsonSchema(route.response.schema, 'output') } : {} };
  }
  const responses: Json = { [status]: answer };
  if (op.requestBody || params.length) responses['400'] = errorResponse('Invalid request: `param` names the offending field');
  if (route.access === 'user' || route.access === 'admin') responses['401'] = errorResponse('Missing or invalid credentials');
  if (route.access === 'admin') responses['403'] = errorResponse('Administrator rights are required');
  if (op.requestBody) responses['413'] = errorResponse('Request body too large for this route');
  op.responses = responses;
  return op;
}

/** The OpenAPI 3.1 document of the given services' route tables (internal routes left out). */
export function openApiDocument(info: OpenApiInfo, services: readonly DocumentedService[]): Json {
  const paths: Record<string, Json> = {};
  for (const service of services) {
    for (const route of service.routes) {
      if (route.access === 'internal') continue;
      const path = openApiPath(route.path);
      const item = (paths[path] ??= {});
      if (item[route.method]) throw new Error(`openapi: ${route.method.toUpperCase()} ${route.path} is declared by two services`);
      item[route.method] = operation(service, route);
    }
  }
  const sorted = Object.fromEntries(Object.entries(paths).sort(([a], [b]) => a.localeCompare(b)));
  return {
    openapi: '3.1.0',
    info,
    paths: sorted,
    components: {
      securitySchemes: {
        bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        apiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
      },
      schemas: {
        Error: {
          type: 'object',
          required: ['error'],
          properties: {
            error: {
              type: 'object',
              required: ['type', 'code', 'message', 'param', 'request_id'],
              properties: {
                type: { type: 'string' },
                code: { type: 'string' },
                message: { type: 'string' },
                param: { type: ['string', 'null'] },
                request_id: { type: ['string', 'null'] },
              },
            },
          },
        },
      },
    },
  };
}

/** docs/api.md: one line per endpoint (method, path, who may call it, what it does), grouped by service. */
export function apiMarkdown(services: readonly DocumentedService[]): string {
  const lines = [
    '# API endpoints',
    '',
    '<!-- Generated by `npm run openapi` from the route tables; do not edit by hand. -->',
    '',
    'One line per endpoint: method, path, who may call it, what it does. The full request and answer',
    'schemas are in [openapi.json](openapi.json) (also served by the edge at `/openapi.json`).',
    'Access: `public` needs no credential; `user` needs a JWT or an API key (`Authorization: Bearer`, as',
    'the openai SDK sends it, or `X-API-Key`); `admin` also needs an administrator; `internal` is called by other services on their',
    'internal address and is never routed by the edge.',
  ];
  for (const service of services) {
    if (service.routes.length === 0) continue;
    lines.push('', `## ${service.name}`, '');
    // The edge routes the alias for the API paths only; the public documents stay at the root.
    if (service.aliases?.length) lines.push(`Every \`/v1/\` and \`/auth/\` path is also served under ${service.aliases.map((a) => `\`${a}\``).join(', ')}.`, '');
    for (const route of service.routes) {
      const note = route.planned ? ' (planned, answers 501)' : '';
      lines.push(`- \`${route.method.toUpperCase()} ${openApiPath(route.path)}\` (${ACCESS_LABEL[route.access]}) ${route.summary}${note}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Stand-in dependencies for building a route table without a running service. Reading anything but
 * the `known` values (settings a table reads while it is built, such as a body limit) throws, which
 * is how the generator enforces "routes(deps) never touches deps".
 */
export function unbuiltDeps<T>(name = 'deps', known: Partial<T> = {}): T {
  return new Proxy(known as object, {
    get(target, property) {
      if (Object.prototype.hasOwnProperty.call(target, property)) return (target as Record<PropertyKey, unknown>)[property];
      if (property === 'then') return undefined; // not a thenable
      throw new Error(`${name}.${String(property)} was read while a route table was built for documentation`);
    },
  }) as T;
}
