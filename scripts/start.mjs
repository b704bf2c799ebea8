#!/usr/bin/env node
// `npm start`: run the whole platform in one process on the embedded defaults unless the
// environment says otherwise. With TypeScript installed (a development checkout) it first builds
// (tsc --incremental only recompiles what changed); without it (`npm ci --omit=dev`), it runs the
// compiled output in dist/ as it is. Nothing from devDependencies is loaded at run time.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const entry = join(root, 'dist', 'services', 'platform', 'main.js');
if (existsSync(tsc)) {
  const build = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit', cwd: root });
  if (build.status !== 0) {
    console.error('build failed');
    process.exit(build.status ?? 1);
  }
  // The web console's static files (dist/console), served at /console/.
  const consoleBuild = spawnSync(process.execPath, [join(root, 'scripts', 'build-console.mjs')], { stdio: 'inherit', cwd: root });
  if (consoleBuild.status !== 0) process.exit(consoleBuild.status ?? 1);
} else if (!existsSync(entry)) {
  console.error('dist/ is missing and TypeScript is not installed: build once where dev dependencies are installed (npm run build), or npm install');
  process.exit(1);
}
await import(entry);
