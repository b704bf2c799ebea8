import { readFileSync } from 'node:fs';
import test from 'ava';
import { REPOSITORY_ROOT } from '../helpers/repository.js';
import { importGraph, isEntry, isStandaloneStart, KIT_ENTRIES, sameUnit, sourceFiles, unitOf, type ImportEdge } from './import-graph.js';

// The layering the architecture page states, checked over the TypeScript import graph on every
// run (ARCHITECTURE.md, "Service layout"). Each failure names the importing file and the import.
const ROOT = REPOSITORY_ROOT;
const graph = importGraph(ROOT);
const internal = graph.filter((e) => !e.external);
const show = (edges: ImportEdge[]) => edges.map((e) => `${e.from} -> ${e.to}`);

test('the graph covers the source folders', (t) => {
  const files = sourceFiles(ROOT);
  t.true(files.some((f) => f.startsWith('services/llm-api/')));
  t.true(files.some((f) => f.startsWith('plugins/')));
  t.true(internal.length > 200, `${internal.length} internal imports`);
});

test('no service imports another service (only the platform composes them)', (t) => {
  const bad = internal.filter((e) => {
    const from = unitOf(e.from);
    const to = unitOf(e.to);
    return from.kind === 'service' && to.kind === 'service' && from.name !== to.name;
  });
  t.deepEqual(show(bad), []);
});

test('every service has its own settings (config.ts), its composition root (deps.ts) and its definition (service.ts), and builds its dependencies there', (t) => {
  const files = new Set(sourceFiles(ROOT));
  const services = [...new Set([...files].map((f) => unitOf(f)).filter((u) => u.kind === 'service').map((u) => u.name))];
  t.true(services.length >= 5, services.join(', '));
  const missing = services.flatMap((name) => ['config.ts', 'deps.ts', 'service.ts'].map((file) => `services/${name}/${file}`).filter((path) => !files.has(path)));
  t.deepEqual(missing, []);
  const composed = services.filter((name) => internal.some((e) => e.from === `services/${name}/service.ts` && e.to === `services/${name}/deps.ts`));
  t.deepEqual(composed, services, 'service.ts builds its dependencies through deps.ts');
});

test('the kit imports nothing above it', (t) => {
  const bad = internal.filter((e) => unitOf(e.from).kind === 'kit' && unitOf(e.to).kind !== 'kit');
  t.deepEqual(show(bad), []);
});

test('domains import only the kit and other domains', (t) => {
  const bad = internal.filter((e) => unitOf(e.from).kind === 'domain' && !['kit', 'domain'].includes(unitOf(e.to).kind));
  t.deepEqual(show(bad), []);
});

test('workers import only domains and the kit', (t) => {
  const bad = internal.filter((e) => {
    const from = unitOf(e.from);
    const to = unitOf(e.to);
    return from.kind === 'worker' && !sameUnit(from, to) && !['kit', 'domain'].includes(to.kind) && !isStandaloneStart(e);
  });
  t.deepEqual(show(bad), []);
});

test('plugins import only plugins/core and kit/core', (t) => {
  const bad = internal.filter((e) => {
    const from = unitOf(e.from);
    const to = unitOf(e.to);
    if (from.kind !== 'plugin' && from.kind !== 'plugin-core') return false;
    if (sameUnit(from, to) || to.kind === 'plugin-core') return false;
    return e.to !== 'services/kit/core/index.ts';
  });
  t.deepEqual(show(bad), []);
});

test("nobody imports another unit's internals, only its entry (index.ts; a service's service.ts; the kit's layer entries)", (t) => {
  const bad = internal.filter((e) => {
    const from = unitOf(e.from);
    const to = unitOf(e.to);
    if (from.kind === 'outside' || sameUnit(from, to)) return false;
    return !isEntry(e.to) && !isStandaloneStart(e);
  });
  t.deepEqual(show(bad), []);
});

test('kit/core loads no package, not even zod (node built-ins aside; types and on-use imports do not load)', (t) => {
  const reached = new Set<string>();
  const external = new Set<string>();
  const visit = (file: string) => {
    if (reached.has(file)) return;
    reached.add(file);
    for (const edge of graph) {
      if (edge.from !== file || edge.typeOnly || edge.dynamic) continue;
      if (edge.external) external.add(edge.to);
      else visit(edge.to);
    }
  };
  visit(Object.keys(KIT_ENTRIES).find((f) => KIT_ENTRIES[f] === 'kit/core')!);
  t.deepEqual([...external].filter((name) => !name.startsWith('node:')).sort(), []);
});

test('running code loads only dependencies, never devDependencies (npm start works after npm ci --omit=dev)', (t) => {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
  const packageOf = (specifier: string) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);
  const bad = graph.filter((e) => e.external && !e.typeOnly && !e.to.startsWith('node:') && !(packageOf(e.to) in pkg.dependencies));
  t.deepEqual(show(bad), []);
});
