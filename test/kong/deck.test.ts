import test from 'ava';
import { readFileSync } from 'node:fs';
import Ajv04Module from 'ajv-draft-04';
import { parse } from 'yaml';
import { parseApiKeyAuthConfig, Schema as apiKeySchema } from '../../plugins/api-key-auth/schema.js';
import type { KongFieldEntry } from '../../plugins/core/kong-schema.js';
import { parseIdentityHeadersConfig, Schema as identitySchema } from '../../plugins/identity-headers/schema.js';
import { parseJwtAuthConfig, Schema as jwtSchema } from '../../plugins/jwt-auth/schema.js';
import { parseTieredRateLimitConfig, Schema as rateLimitSchema } from '../../plugins/tiered-rate-limit/schema.js';
import { renderDeck, type DeckFile, type DeckPlugin, type DeckRoute } from '../../services/gateway/deck.js';
import { DECK_FILE, deckVars } from '../gateway/deck-fixture.js';

// deck/kong.yaml checked offline the way `deck file validate` would (Kong's official declarative
// JSON Schema, draft-04, after env rendering), plus what that schema cannot see: each plugin's
// `config` against its schema, and the semantic rules of this gateway.
// ajv-draft-04 is CommonJS with a default export; under NodeNext the class sits on .default.
const Ajv04 = ((Ajv04Module as unknown as { default?: typeof Ajv04Module }).default ?? Ajv04Module) as unknown as new (options: object) => import('ajv').default;
const text = readFileSync(DECK_FILE, 'utf8');
const rendered = parse(renderDeck(text, deckVars())) as DeckFile;

const OUR_SCHEMAS: Record<string, KongFieldEntry[]> = {
  'jwt-auth': jwtSchema,
  'api-key-auth': apiKeySchema,
  'identity-headers': identitySchema,
  'tiered-rate-limit': rateLimitSchema,
};

// What each plugin checks a configuration with: its schema, then the checks no schema field can
// say (a URL Node can parse, tier names `tiers` defines), as the plugin server and the embedded
// edge run them when an instance starts.
const OUR_PARSERS: Record<string, (config: unknown) => unknown> = {
  'jwt-auth': parseJwtAuthConfig,
  'api-key-auth': parseApiKeyAuthConfig,
  'identity-headers': parseIdentityHeadersConfig,
  'tiered-rate-limit': parseTieredRateLimitConfig,
};

// JSON Schemas of the bundled plugins' configs we use (Kong 3.9 schema.lua, reference §5).
const BUNDLED: Record<string, object> = {
  cors: {
    type: 'object',
    additionalProperties: false,
    properties: {
      origins: { type: 'array', items: { type: 'string' } },
      headers: { type: 'array', items: { type: 'string' } },
      exposed_headers: { type: 'array', items: { type: 'string' } },
      methods: { type: 'array', items: { enum: ['GET', 'HEAD', 'PUT', 'PATCH', 'POST', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT'] } },
      max_age: { type: 'number' },
      credentials: { type: 'boolean' },
      private_network: { type: 'boolean' },
      preflight_continue: { type: 'boolean' },
    },
  },
  'request-termination': {
    type: 'object',
    additionalProperties: false,
    properties: {
      status_code: { type: 'integer', minimum: 100, maximum: 599 },
      message: { type: 'string' },
      body: { type: 'string' },
      content_type: { type: 'string' },
      trigger: { type: 'string' },
      echo: { type: 'boolean' },
    },
  },
  prometheus: {
    type: 'object',
    additionalProperties: false,
    properties: {
      per_consumer: { type: 'boolean' },
      status_code_metrics: { type: 'boolean' },
      ai_metrics: { type: 'boolean' },
      latency_metrics: { type: 'boolean' },
      bandwidth_metrics: { type: 'boolean' },
      upstream_health_metrics: { type: 'boolean' },
    },
  },
  jwt: {
    type: 'object',
    additionalProperties: false,
    properties: {
      uri_param_names: { type: 'array', items: { type: 'string' } },
      cookie_names: { type: 'array', items: { type: 'string' } },
      key_claim_name: { type: 'string' },
      secret_is_base64: { type: 'boolean' },
      claims_to_verify: { type: 'array', items: { enum: ['exp', 'nbf'] } },
      anonymous: { type: 'string' },
      run_on_preflight: { type: 'boolean' },
      maximum_expiration: { type: 'integer', minimum: 0, maximum: 31536000 },
      header_names: { type: 'array', items: { type: 'string' } },
      realm: { type: 'string' },
    },
  },
};

/** Kong's bundled plugins that set X-Consumer-* / X-Credential-Identifier / X-Authenticated-* themselves. */
const BUNDLED_AUTH = ['jwt', 'key-auth', 'basic-auth', 'oauth2', 'hmac-auth', 'ldap-auth', 'ldap-auth-advanced', 'openid-connect', 'session'];

function allPlugins(deck: DeckFile): Array<{ plugin: DeckPlugin; where: string }> {
  const out: Array<{ plugin: DeckPlugin; where: string }> = [];
  for (const p of deck.plugins ?? []) out.push({ plugin: p, where: 'global' });
  for (const s of deck.services ?? []) {
    for (const p of s.plugins ?? []) out.push({ plugin: p, where: `service ${s.name}` });
    for (const r of s.routes ?? []) for (const p of r.plugins ?? []) out.push({ plugin: p, where: `route ${r.name}` });
  }
  for (const c of deck.consumers ?? []) for (const p of c.plugins ?? []) out.push({ plugin: p, where: `consumer ${c.username}` });
  return out;
}

/** The enabled plugins that apply to a route (route, its service, global). */
function pluginsOn(deck: DeckFile, route: DeckRoute): DeckPlugin[] {
  const service = (deck.services ?? []).find((s) => (s.routes ?? []).includes(route))!;
  const scoped = [...(route.plugins ?? []), ...(service.plugins ?? []), ...(deck.plugins ?? []).filter((p) => (!p.route && !p.service && !p.consumer) || p.service === service.name || p.route === route.name)];
  return scoped.filter((p) => p.enabled !== false);
}

test('deck/kong.yaml validates against Kong’s declarative JSON Schema (draft-04)', (t) => {
  const ajv = new Ajv04({ allErrors: true, strict: false });
  const validate = ajv.compile(JSON.parse(readFileSync('deck/schema/kong_json_schema.json', 'utf8')));
  const ok = validate(rendered);
  t.true(ok, JSON.stringify(validate.errors, null, 2));
});

test('the schema check is not vacuous: a misspelled route field fails it', (t) => {
  const ajv = new Ajv04({ allErrors: true, strict: false });
  const validate = ajv.compile(JSON.parse(readFileSync('deck/schema/kong_json_schema.json', 'utf8')));
  const broken = structuredClone(rendered) as DeckFile;
  (broken.services![0]!.routes![0] as unknown as Record<string, unknown>).pathz = ['/x'];
  t.false(validate(broken));
});

test('every plugin config validates against that plugin’s schema', (t) => {
  const ajv = new Ajv04({ allErrors: true, strict: false });
  for (const { plugin, where } of allPlugins(rendered)) {
    if (OUR_SCHEMAS[plugin.name]) {
      t.notThrows(() => OUR_PARSERS[plugin.name]!(plugin.config ?? {}), `${plugin.name} (${where})`);
    } else {
      const schema = BUNDLED[plugin.name];
      t.truthy(schema, `no schema known for ${plugin.name}`);
      const validate = ajv.compile(schema!);
      t.true(validate(plugin.config ?? {}), `${plugin.name} (${where}): ${JSON.stringify(validate.errors)}`);
    }
  }
});

test('every route that is not tagged public has both auth plugins with the anonymous consumer', (t) => {
  let protectedRoutes = 0;
  for (const service of rendered.services ?? []) {
    for (const route of service.routes ?? []) {
      const names = pluginsOn(rendered, route).map((p) => p.name);
      if (route.tags?.includes('public')) {
        t.false(names.includes('jwt-auth') || names.includes('api-key-auth'), `public route ${route.name} must not require a credential`);
        continue;
      }
      protectedRoutes++;
      for (const auth of ['jwt-auth', 'api-key-auth']) {
        const plugin = pluginsOn(rendered, route).find((p) => p.name === auth);
        t.truthy(plugin, `${route.name} lacks ${auth}`);
        t.is(plugin?.config?.anonymous, 'anonymous', `${route.name}: ${auth} must fall back to the anonymous consumer`);
      }
    }
  }
  t.is(protectedRoutes, 5);
  const anonymous = (rendered.consumers ?? []).find((c) => c.username === 'anonymous');
  t.truthy(anonymous, 'the anonymous consumer exists');
  const termination = anonymous?.plugins?.find((p) => p.name === 'request-termination');
  t.is(termination?.config?.status_code, 401, 'and it is terminated with 401, so it grants nothing');
  t.like(JSON.parse(String(termination?.config?.body)).error, { type: 'auth_error', code: 'unauthorized' });
});

test('public routes are exactly the ARCHITECTURE.md list, declared here, not in code', (t) => {
  const publicRoutes = (rendered.services ?? []).flatMap((s) => (s.routes ?? []).filter((r) => r.tags?.includes('public')).map((r) => r.name)).sort();
  t.deepEqual(publicRoutes, ['edge-healthz', 'edge-readyz', 'internal-blocked', 'llm-api-console', 'llm-api-guest-login', 'llm-api-login', 'llm-api-openapi', 'llm-api-refresh', 'llm-api-well-known', 'media-api-signed-urls']);
});

test('semantic rules: bundled jwt as SPEC.md 5 describes it, path syntax, no cluster policy, identity everywhere', (t) => {
  const jwt = (rendered.plugins ?? []).find((p) => p.name === 'jwt')!;
  t.is(jwt.config!.key_claim_name, 'iss');
  t.deepEqual(jwt.config!.claims_to_verify, ['exp', 'nbf']);
  t.is(jwt.config!.maximum_expiration, 3600);
  t.true((jwt.config!.claims_to_verify as string[]).includes('exp'), 'maximum_expiration needs exp');
  for (const service of rendered.services ?? []) {
    for (const route of service.routes ?? []) {
      for (const path of route.paths ?? []) {
        // A plain prefix such as /llm would also match /llmx: every path is an anchored regex
        // (optionally case-insensitive with PCRE's leading `(?i)`).
        t.true(path.startsWith('~/') || path.startsWith('~(?i)/'), `${route.name}: ${path} should be a regex path`);
        t.notThrows(() => new RegExp(path.slice(1).replace(/^\(\?i\)/, ''), 'i'));
      }
    }
  }
  const limiter = (rendered.plugins ?? []).find((p) => p.name === 'tiered-rate-limit')!;
  t.not(limiter.config!.policy, 'cluster');
  const global = (rendered.plugins ?? []).filter((p) => !p.service && !p.route && !p.consumer && p.enabled !== false).map((p) => p.name);
  t.deepEqual(global.sort(), ['cors', 'identity-headers', 'prometheus', 'tiered-rate-limit']);
  // A route-, service- or consumer-scoped limiter counts addresses in its access phase whatever
  // `ip_limit_phase` says (Kong runs a rewrite phase for global instances only; the plugin and the
  // embedded edge know it). With a Redis prefix of its own, so the requests it counts do not add
  // to the global limiter's count of the same address (which counts them too, in its rewrite phase).
  const globalPrefix = parseTieredRateLimitConfig(limiter.config ?? {}).redis_prefix;
  for (const { plugin, where } of allPlugins(rendered)) {
    const scoped = where !== 'global' || Boolean(plugin.route ?? plugin.service ?? plugin.consumer);
    if (plugin.name !== 'tiered-rate-limit' || !scoped || plugin.enabled === false) continue;
    const config = parseTieredRateLimitConfig(plugin.config ?? {});
    if (config.ip_per_minute > 0 || config.ip_per_hour > 0) t.not(config.redis_prefix, globalPrefix, `${where}: a scoped limiter counts addresses under a prefix of its own`);
  }
  // Kong's own consumer headers a client sends are stripped (Kong passes them on for our plugins),
  // which suits this file only while none of Kong's bundled auth plugins is enabled.
  const identity = (rendered.plugins ?? []).find((p) => p.name === 'identity-headers')!;
  t.is(identity.config!.strip_kong_consumer_headers, true);
  const bundledAuth = allPlugins(rendered).filter(({ plugin }) => BUNDLED_AUTH.includes(plugin.name) && plugin.enabled !== false);
  t.deepEqual(bundledAuth.map(({ plugin, where }) => `${plugin.name} (${where})`), [], 'a bundled auth plugin needs strip_kong_consumer_headers: false');
  // Kong's metrics for scraping, without a consumer label.
  const prometheus = (rendered.plugins ?? []).find((p) => p.name === 'prometheus')!;
  t.like(prometheus.config, { per_consumer: false, status_code_metrics: true, latency_metrics: true });
});

test('every DECK_* variable the file uses has an embedded default (npm start needs no environment)', (t) => {
  const used = new Set([...text.matchAll(/env "([A-Z0-9_]+)"/g)].map((m) => m[1]!));
  const defaults = deckVars();
  for (const name of used) t.truthy(defaults[name], name);
});

test('kong/kong.conf registers one plugin server per plugin with absolute commands and --dump-all-plugins', (t) => {
  const conf = readFileSync('kong/kong.conf', 'utf8');
  const get = (key: string) => new RegExp(`^${key} = (.+)$`, 'm').exec(conf)?.[1];
  const names = get('pluginserver_names')!.split(',');
  t.deepEqual(names, Object.keys(OUR_SCHEMAS));
  t.is(get('plugins'), `bundled,${names.join(',')}`);
  for (const name of names) {
    const key = name.replace(/-/g, '_');
    const socket = get(`pluginserver_${key}_socket`)!;
    const start = get(`pluginserver_${key}_start_cmd`)!;
    const query = get(`pluginserver_${key}_query_cmd`)!;
    t.regex(start, /^\/usr\/bin\/node \/\S+\/kong-js-pluginserver /);
    t.true(start.includes(`-d /opt/ai-gateway/kong/dist/${name}`));
    const prefix = /-p (\S+)/.exec(start)![1]!;
    const sock = /--sock-name (\S+)/.exec(start)![1]!;
    t.is(socket, `${prefix}${sock}`, 'socket = prefix + sock-name');
    t.regex(query, new RegExp(`^/usr/bin/node \\S+ -d /opt/ai-gateway/kong/dist/${name} --dump-all-plugins$`));
  }
  t.is(get('nginx_http_client_body_buffer_size'), '1m');
});

test('routes whose answers stream (SSE) turn Kong’s response buffering off; kong.conf does not rely on a directive Kong overrides', (t) => {
  // Kong's proxy `location /` sets `proxy_buffering on` itself (nginx_kong.lua), which overrides a
  // server-level `nginx_proxy_proxy_buffering = off`: only a route's `response_buffering: false`
  // sends it through Kong's unbuffered location, so SSE chunks reach the client as they come.
  const streaming = ['llm-api-v1', 'response-api-responses', 'mcp-tools-mcp'];
  for (const service of rendered.services ?? []) {
    for (const route of service.routes ?? []) {
      if (streaming.includes(route.name)) t.is((route as DeckRoute & { response_buffering?: boolean }).response_buffering, false, `${route.name} streams SSE answers`);
    }
  }
  const routes = (rendered.services ?? []).flatMap((s) => (s.routes ?? []).map((r) => r.name));
  for (const name of streaming) t.true(routes.includes(name), `${name} exists`);
  const conf = readFileSync('kong/kong.conf', 'utf8');
  t.false(/^nginx_proxy_proxy_buffering\s*=/m.test(conf), 'a server-level proxy_buffering is overridden by the location Kong generates');
});
