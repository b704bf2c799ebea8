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
  // Plugins import the kit through its kit/core entry; its modules have no side effects, so a bundle
  // keeps only what a plugin uses (not the config loader or validation helpers it never calls).
  const kitWithoutSideEffects = {
    name: 'kit-without-side-effects',
    setup(pluginBuild) {
      pluginBuild.onResolve({ filter: /^\./ }, (args) => {
        const path = join(args.resolveDir, args.path).replace(/\.js$/, '.ts');
        return path.includes('/services/kit/') ? { path, sideEffects: false } : undefined;
      });
    },
  };
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
      // The Node.js the Kong image runs the plugin servers with (deploy/Dockerfile); kong/README.md
      // names it and test/kong/node-target.test.ts checks the three agree.
      target: 'node20',
      logLevel: 'error',
      legalComments: 'none',
      plugins: [kitWithoutSideEffects],
    });
  }
  return outDir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = await buildKongPlugins(process.argv[2]);
  console.log(`built ${PLUGINS.length} Kong plugins into ${out}`);
}
