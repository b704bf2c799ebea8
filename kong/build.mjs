#!/usr/bin/env node
// Bundles each plugin's Kong adapter (plugins/<name>/kong.ts) into one CommonJS file,
// kong/dist/<name>/<name>.js: kong-js-pluginserver loads every entry of a plugin directory, so each
// directory holds only its entry file (shared modules and ESM-only jose are bundled in).
// Usage: node kong/build.mjs [outDir]   (npm run build:kong)
import { build } from 'esbuild';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PLUGINS = ['jwt-auth', 'api-key-auth', 'identity-headers', 'tiered-rate-limit'];
const root = join(dirname(fileURLToPath(import.meta.url)), '..');

export async function buildKongPlugins(outDir = join(root, 'kong', 'dist')) {
  mkdirSync(outDir, { recursive: true });
  // The repository is "type": "module"; the bundles are CommonJS (what the plugin server requires).
  writeFileSync(join(outDir, 'package.json'), '{ "type": "commonjs" }\n');
  for (const name of PLUGINS) {
    const dir = join(outDir, name);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    await build({
      entryPoints: [join(root, 'plugins', name, 'kong.ts')],
      outfile: join(dir, `${name}.js`),
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node18',
      logLevel: 'error',
      legalComments: 'none',
    });
  }
  return outDir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = await buildKongPlugins(process.argv[2]);
  console.log(`built ${PLUGINS.length} Kong plugins into ${out}`);
}
