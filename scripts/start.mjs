#!/usr/bin/env node
// `npm start`: build when needed (tsc --incremental only recompiles what changed), then run the
// whole platform in one process on the embedded defaults unless the environment says otherwise.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const build = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit', cwd: root });
if (build.status !== 0) {
  console.error('build failed');
  process.exit(build.status ?? 1);
}
await import(join(root, 'dist', 'services', 'platform', 'main.js'));
