import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { parseDeck } from '../../services/gateway/deck.js';
import { checkOwnConfig, loadBaseConfig, revocationChannelFor } from '../../services/kit/index.js';
import { configShapes } from '../../services/platform/config.js';
import { productionRefusals } from '../../services/platform/production-safety.js';
import { services as serviceDefs, workers as workerDefs } from '../../services/platform/registry.js';

// deploy/compose.yaml checked statically (no Docker here): what compose would interpolate from
// deploy/example.env, whether every service and worker is there with a health check, whether
// deck/kong.yaml rendered with the deck-sync environment points at compose services listening on
// those ports, and whether each process's environment passes the platform's own config validation.

interface ComposeService {
  image?: string;
  build?: { target?: string };
  command?: string[];
  entrypoint?: string[];
  user?: string;
  security_opt?: string[];
  environment?: Record<string, string | number>;
  healthcheck?: { test: string[] };
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
}

const composeText = readFileSync('deploy/compose.yaml', 'utf8');
const compose = parse(composeText, { merge: true }) as { services: Record<string, ComposeService> };
const envExample = parseEnvFile(readFileSync('deploy/example.env', 'utf8'));

function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const match = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (match) out[match[1]!] = match[2]!;
  }
  return out;
}

/** Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?}, and $$ for a literal dollar. */
function interpolate(value: string, env: Record<string, string>): string {
  return value.replace(/\$\$|\$\{([A-Z_][A-Z0-9_]*)(?::([-?])([^}]*))?\}/g, (all, name: string | undefined, op: string | undefined, arg: string | undefined) => {
    if (all === '$$') return '$';
    const set = env[name!];
    if (op === '?' && !set) throw new Error(`required variable ${name} is empty`);
    if (op === '-' && !set) return arg ?? '';
    return set ?? '';
  });
}

const envOf = (svc: ComposeService): Record<string, string> =>
  Object.fromEntries(Object.entries(svc.environment ?? {}).map(([key, value]) => [key, interpolate(String(value), envExample)]));

const nodeServices = Object.entries(compose.services).filter(([, svc]) => svc.command?.[0] === 'node');
const entryOf = (svc: ComposeService) => /^dist\/(services|workers)\/([a-z-]+)\/main\.js$/.exec(svc.command?.[1] ?? '');

test('every variable compose interpolates is in example.env, and every required one has a value there', (t) => {
  const referenced = new Set([...composeText.matchAll(/\$\{([A-Z_][A-Z0-9_]*)(:[-?])?/g)].map((m) => m[1]!));
  t.true(referenced.size > 20);
  for (const name of referenced) t.true(name in envExample, `${name} missing from deploy/example.env`);
  for (const m of composeText.matchAll(/\$\{([A-Z_][A-Z0-9_]*):\?/g)) t.truthy(envExample[m[1]!], `${m[1]} is required but empty in example.env`);
  // Placeholders only: every secret-looking value in the example says so.
  for (const [name, value] of Object.entries(envExample)) {
    if (/PASSWORD|SECRET|MASTER_KEY/.test(name)) t.regex(value, /^change-me/, `${name} must be a change-me placeholder`);
  }
  // The whole file interpolates with the example values (no malformed reference).
  t.notThrows(() => interpolate(composeText, envExample));
});

test('every service and worker of the platform runs from its own entry point, and each entry point exists', (t) => {
  const byName = new Map(nodeServices.map(([name, svc]) => [name, entryOf(svc)]));
  for (const def of [...serviceDefs, ...workerDefs]) {
    const entry = byName.get(def.name);
    t.truthy(entry, `${def.name} is not in deploy/compose.yaml`);
    t.is(entry![2], def.name, `${def.name} runs another entry point`);
  }
  for (const [name, svc] of nodeServices) {
    const entry = entryOf(svc);
    t.truthy(entry, `${name}: command ${svc.command?.join(' ')}`);
    t.true(existsSync(`${entry![1]}/${entry![2]}/main.ts`), `${name}: ${entry![1]}/${entry![2]}/main.ts does not exist`);
    t.is(svc.build?.target, 'platform');
  }
  for (const infra of ['kong', 'deck-sync', 'keycloak', 'postgres', 'rabbitmq', 'redis', 'minio']) t.truthy(compose.services[infra], `${infra} missing`);
  t.is(compose.services.kong!.build?.target, 'kong');
});

test('every long-running container has a health check; each HTTP service probes /healthz on the port it listens on', (t) => {
  const oneShot = new Set(['deck-sync', 'kong-migrations', 'minio-bucket']);
  for (const [name, svc] of Object.entries(compose.services)) {
    if (oneShot.has(name)) continue;
    t.truthy(svc.healthcheck?.test?.length, `${name} has no health check`);
  }
  for (const def of serviceDefs) {
    const svc = compose.services[def.name]!;
    const port = listenPort(def.name);
    t.truthy(port, `${def.name}: no <NAME>_PORT set`);
    t.true(svc.healthcheck!.test.join(' ').includes(`http://127.0.0.1:${port}/healthz`), `${def.name} health check does not probe :${port}/healthz`);
    // Services bind on the container network, never published: Kong is the only public door.
    t.is(envOf(svc).HOST, '0.0.0.0');
    t.falsy(svc.ports, `${def.name} must not publish a port`);
  }
});

/** The port a compose service listens on, from the platform's <NAME>_PORT setting it is given. */
function listenPort(name: string): string | undefined {
  const svc = compose.services[name];
  if (!svc) return undefined;
  return envOf(svc)[`${name.replace(/-/g, '_').toUpperCase()}_PORT`];
}

test('deck/kong.yaml rendered with the deck-sync environment: every upstream is a compose service listening there', (t) => {
  const deckText = readFileSync('deck/kong.yaml', 'utf8');
  const deckEnv = envOf(compose.services['deck-sync']!);
  const used = new Set([...deckText.matchAll(/env "(DECK_[A-Z0-9_]+)"/g)].map((m) => m[1]!));
  for (const name of used) t.truthy(deckEnv[name], `deck-sync does not set ${name}`);
  for (const name of Object.keys(deckEnv)) t.true(used.has(name), `deck-sync sets ${name}, which deck/kong.yaml does not use`);

  const deck = parseDeck(deckText, deckEnv);
  const checked = new Set<string>();
  for (const service of deck.services ?? []) {
    const url = new URL(String(service.url));
    t.truthy(compose.services[url.hostname], `deck service ${service.name} points at ${url.host}, not a compose service`);
    t.is(listenPort(url.hostname), url.port, `deck service ${service.name}: ${url.hostname} does not listen on ${url.port}`);
    checked.add(url.hostname);
  }
  t.deepEqual([...checked].sort(), serviceDefs.map((d) => d.name).sort(), 'every HTTP service is reachable through the edge');

  // The internal addresses the services give each other agree with the deck's upstreams.
  const platformEnv = envOf(compose.services['llm-api']!);
  for (const key of ['LLM_API_URL', 'RESPONSE_API_URL', 'MEDIA_API_URL', 'MCP_TOOLS_URL']) t.is(platformEnv[key], deckEnv[`DECK_${key}`]);
  // Key validation goes straight to llm-api's internal route, JWKS to Keycloak, issuers agree.
  t.is(new URL(deckEnv.DECK_API_KEY_VALIDATE_URL!).host, new URL(deckEnv.DECK_LLM_API_URL!).host);
  t.is(new URL(deckEnv.DECK_JWKS_URL!).hostname, 'keycloak');
  t.is(deckEnv.DECK_JWT_ISSUER, platformEnv.JWT_ISSUER);
  t.is(deckEnv.DECK_JWT_AUDIENCE, platformEnv.JWT_AUDIENCE);
  t.is(deckEnv.DECK_GATEWAY_SHARED_SECRET, platformEnv.GATEWAY_SHARED_SECRET);
  t.is(deckEnv.DECK_REDIS_URL, platformEnv.REDIS_URL);
  // Kong's api-key-auth listens on the revocation channel llm-api publishes on: one prefix names it.
  t.is(revocationChannelFor(deckEnv.DECK_REDIS_PREFIX!), revocationChannelFor(loadBaseConfig(platformEnv).EDGE_REDIS_PREFIX));
  t.is(deckEnv.DECK_RATE_LIMIT_POLICY, 'redis', 'several Kong nodes must share counters');
});

test('each process environment: every variable exists in a config shape, secrets are set, and it passes the platform validation', (t) => {
  const known = new Set(configShapes().flatMap(({ shape }) => Object.keys(shape)));
  const defs = new Map([...serviceDefs, ...workerDefs].map((d) => [d.name, d]));
  for (const [name, svc] of nodeServices) {
    const env = envOf(svc);
    for (const key of Object.keys(env)) t.true(known.has(key), `${name} sets ${key}, which no configuration shape declares`);
    for (const secret of ['GATEWAY_SHARED_SECRET', 'MASTER_KEY', 'DATABASE_URL', 'AMQP_URL', 'REDIS_URL']) t.truthy(env[secret], `${name} lacks ${secret}`);
    t.is(env.NODE_ENV, 'production');
    const config = loadBaseConfig(env);
    t.notThrows(() => checkOwnConfig([defs.get(name)!], config.env), `${name}: its own configuration is refused`);
    // example.env's secrets are placeholders a production start refuses until replaced; nothing else.
    const refused = productionRefusals(config);
    t.true(refused.every((line) => line.includes('"change-me" placeholder')), `${name}: production start would be refused: ${refused.join('; ')}`);
  }
  for (const name of ['media-api', 'media-dedup']) {
    const env = envOf(compose.services[name]!);
    t.is(env.MEDIA_STORAGE, 's3');
    for (const key of ['S3_ENDPOINT', 'S3_BUCKET', 'S3_ACCESS_KEY_ID', 'S3_SECRET_ACCESS_KEY', 'MEDIA_SIGNING_SECRET']) t.truthy(env[key], `${name} lacks ${key}`);
    t.is(new URL(env.S3_ENDPOINT!).hostname, 'minio');
  }
  // Every service shares the same secrets (tokens minted by one are accepted by all).
  const secretsOf = (name: string) => ['GATEWAY_SHARED_SECRET', 'MASTER_KEY', 'DATABASE_URL'].map((k) => envOf(compose.services[name]!)[k]);
  for (const [name] of nodeServices) t.deepEqual(secretsOf(name), secretsOf('llm-api'), name);
});

test('Kong is built with our plugin servers and the kong.conf that registers them', (t) => {
  const dockerfile = readFileSync('deploy/Dockerfile', 'utf8');
  const kongConf = readFileSync('kong/kong.conf', 'utf8');
  t.regex(dockerfile, /COPY kong\/kong\.conf \/etc\/kong\/kong\.conf/);
  t.regex(dockerfile, /npm run build:kong/);
  t.regex(dockerfile, /kong\/dist \/opt\/ai-gateway\/kong\/dist/);
  t.regex(dockerfile, /\/opt\/ai-gateway\/node_modules/);
  t.regex(dockerfile, /\/usr\/bin\/node/);
  const deckPlugins = new Set([...readFileSync('deck/kong.yaml', 'utf8').matchAll(/name: (jwt-auth|api-key-auth|identity-headers|tiered-rate-limit)\b/g)].map((m) => m[1]!));
  const servers = /pluginserver_names = (.*)/.exec(kongConf)![1]!.split(',').map((s) => s.trim());
  t.deepEqual([...deckPlugins].sort(), [...servers].sort());
  t.true(existsSync('deploy/postgres-init.sql'));
  t.regex(readFileSync('deploy/postgres-init.sql', 'utf8'), /CREATE DATABASE kong;[\s\S]*CREATE DATABASE keycloak;/);
  // The admin API is never published.
  t.false((compose.services.kong!.ports ?? []).some((p) => p.endsWith(':8001')));
  // No proxy is trusted unless the operator names it: a trusted range lets any client in it pick its address.
  t.notRegex(kongConf, /^trusted_ips\s*=/m);
  t.is(envOf(compose.services.kong!).KONG_TRUSTED_IPS, '', 'example.env trusts none');
});

test('the platform image serves its API document, and the build context leaves out host builds, data and history', (t) => {
  const dockerfile = readFileSync('deploy/Dockerfile', 'utf8');
  t.regex(dockerfile, /COPY --from=build \/src\/docs\/openapi\.json \.\/docs\/openapi\.json/);
  const ignored = readFileSync('.dockerignore', 'utf8').split('\n').map((line) => line.trim());
  for (const path of ['node_modules', 'dist', 'kong/dist', '.data', '.git']) t.true(ignored.includes(path), path);
});

test('a secret no platform process sees is refused by the container that takes it while it holds the placeholder', (t) => {
  // Platform processes refuse change-me values themselves (productionRefusals, checked above); a
  // secret only an infrastructure container receives needs that container to refuse it.
  const nodeNames = new Set(nodeServices.map(([name]) => name));
  let guarded = 0;
  for (const [name, value] of Object.entries(envExample)) {
    if (!/PASSWORD|SECRET|MASTER_KEY/.test(name) || !value) continue;
    const consumers = Object.entries(compose.services).filter(([, svc]) => Object.values(envOf(svc)).some((v) => v.includes(value)));
    t.true(consumers.length > 0, `${name} reaches no container`);
    if (consumers.some(([consumer]) => nodeNames.has(consumer))) continue;
    for (const [consumer, svc] of consumers) {
      t.truthy(svc.entrypoint, `${consumer} starts with the ${name} placeholder: it has no entrypoint refusing it`);
      const run = (env: Record<string, string>) => {
        const [file, ...args] = svc.entrypoint!.map((part) => part.replace(/\$\$/g, '$'));
        return spawnSync(file!, [...args, ...(svc.command ?? [])], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, encoding: 'utf8' });
      };
      const refused = run(envOf(svc));
      t.is(refused.status, 1, `${consumer} accepts the ${name} placeholder`);
      t.regex(refused.stderr, new RegExp(`${name}.*change-me`));
      // A real value passes the check and reaches the image's own start command (absent here).
      const replaced = Object.fromEntries(Object.entries(envOf(svc)).map(([k, v]) => [k, v.replaceAll(value, 'a-real-secret-of-32-characters-xx')]));
      const started = run(replaced);
      t.is(started.status, 127, `${consumer} with a real ${name}: ${started.stderr}`);
      t.notRegex(started.stderr, /change-me/);
      guarded += 1;
    }
  }
  t.true(guarded >= 1, 'KEYCLOAK_ADMIN_PASSWORD reaches Keycloak alone');
});

test('mcp-tools can build its python_exec sandbox: user namespaces, a fresh /proc, and no root beside unmasked system paths', (t) => {
  const svc = compose.services['mcp-tools']!;
  const opts = new Set(svc.security_opt ?? []);
  // bwrap --unshare-all needs unshare(CLONE_NEWUSER) (seccomp), mounts (AppArmor) and --proc /proc,
  // which the kernel refuses while Docker masks paths under the container's /proc ("mount too revealing").
  for (const opt of ['seccomp=unconfined', 'apparmor=unconfined', 'systempaths=unconfined']) t.true(opts.has(opt), `mcp-tools lacks security_opt ${opt}`);
  // With /proc/sys and /proc/sysrq-trigger writable, root in the container would reach the host: the image's non-root user runs it.
  t.falsy(svc.user, 'mcp-tools must keep the image user');
  t.regex(readFileSync('deploy/Dockerfile', 'utf8'), /FROM node:\S+ AS platform[\s\S]*\bbubblewrap\b[\s\S]*\nUSER node\n/);
  // Only mcp-tools is relaxed.
  for (const [name, other] of Object.entries(compose.services)) if (name !== 'mcp-tools') t.falsy(other.security_opt, `${name} relaxes its security profile`);
});

test('PostgreSQL is healthy only once it accepts connections over the network, not while its init scripts run', (t) => {
  // During first-start initialisation (postgres-init.sql) the image runs a temporary server on its
  // Unix socket only; a socket probe reports it ready then, and kong-migrations (restart "no") and the
  // services connecting to postgres:5432 would be refused.
  const probe = compose.services.postgres!.healthcheck!.test.join(' ');
  t.regex(probe, /pg_isready\b/);
  t.regex(probe, /\s(-h|--host)[ =](127\.0\.0\.1|localhost)\b/, probe);
  t.regex(probe, /\s(-p|--port)[ =]5432\b/, probe);
  for (const name of ['kong-migrations', 'keycloak', 'llm-api']) t.is(compose.services[name]!.depends_on?.postgres?.condition, 'service_healthy', name);
});

test('kong-migrations bootstraps an empty database and applies a newer Kong image\'s migrations', (t) => {
  // `bootstrap` alone does nothing on a bootstrapped database: after KONG_IMAGE moves to a newer Kong,
  // kong would refuse to start on pending migrations. bootstrap, up and finish each exit 0 when there is nothing to do.
  const svc = compose.services['kong-migrations']!;
  t.deepEqual(svc.command, ['/bin/sh', '-c', 'kong migrations bootstrap && kong migrations up && kong migrations finish']);
  t.is(compose.services.kong!.depends_on?.['kong-migrations']?.condition, 'service_completed_successfully');
});
