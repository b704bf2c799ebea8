import { readFileSync } from 'node:fs';
import type { RequestListener } from 'node:http';
import { Validator } from '@seriousme/openapi-schema-validator';
import test from 'ava';
import { openApiPath, ROUTE_TABLE, type Route } from '../../services/kit/index.js';
import { API_MD_FILE, generatedApiDocs, OPENAPI_FILE } from '../../services/platform/openapi.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The API document is generated from the route tables: committed copies must be current, the
// document must be valid OpenAPI 3.1, and every route a running service mounts must be in it.

test('docs/openapi.json and docs/api.md are what `npm run openapi` generates', (t) => {
  const generated = generatedApiDocs();
  for (const [file, content] of Object.entries(generated)) {
    t.is(readFileSync(file, 'utf8'), content, `${file} is stale: run npm run openapi and commit the result`);
  }
});

test('the document is valid OpenAPI 3.1', async (t) => {
  const document = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as Record<string, unknown>;
  t.is(document.openapi, '3.1.0');
  const result = await new Validator().validate(document);
  t.true(result.valid, JSON.stringify(result.errors, null, 2)?.slice(0, 4000));
});

let platform: TestPlatform;
test.before(async () => {
  platform = await startTestPlatform();
});
test.after.always(() => platform?.stop());

interface Layer {
  route?: { path: unknown; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] } & Record<symbol, unknown>;
}

/** Route tables mounted in a running app (the routers `mountRoutes` made), and hand-mounted paths. */
function mountedRoutes(app: { router: { stack: Layer[] } }) {
  const tables: Route[] = [];
  const byHand: string[] = [];
  const walk = (stack: Layer[]) => {
    for (const layer of stack) {
      const table = layer.handle?.[ROUTE_TABLE] as { routes: Route[] } | undefined;
      if (table) tables.push(...table.routes);
      else if (layer.route) for (const method of Object.keys(layer.route.methods)) byHand.push(`${method.toUpperCase()} ${String(layer.route.path)}`);
      else if (layer.handle?.stack) walk(layer.handle.stack);
    }
  };
  walk(app.router.stack);
  return { tables, byHand };
}

test('every route a running service mounts from its table is in the document, and nothing else is', async (t) => {
  const document = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as { paths: Record<string, Record<string, unknown>> };
  const apiMd = readFileSync(API_MD_FILE, 'utf8');
  const documented = new Set(Object.entries(document.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`)));
  const mounted = new Set<string>();
  for (const started of platform.platform.started) {
    if (started.name === 'gateway') continue;
    const app = started.server.server.listeners('request')[0] as RequestListener & { router: { stack: Layer[] } };
    const { tables, byHand } = mountedRoutes(app);
    const legacy = [...new Set(byHand)].filter((route) => !/^GET \/(healthz|readyz|metrics)$/.test(route));
    if (legacy.length) t.log(`${started.name}: mounted by hand, not yet a route table: ${legacy.join(', ')}`);
    for (const route of tables) {
      const key = `${route.method} ${openApiPath(route.path)}`;
      mounted.add(key);
      if (route.access === 'internal') t.true(apiMd.includes(`\`${route.method.toUpperCase()} ${openApiPath(route.path)}\``), `${key} in api.md`);
      else t.true(documented.has(key), `${started.name}: ${key} is mounted but not documented`);
    }
  }
  t.true(mounted.size > 20, `found ${mounted.size} mounted routes`);
  for (const key of documented) t.true(mounted.has(key), `${key} is documented but no running service mounts it`);
});
