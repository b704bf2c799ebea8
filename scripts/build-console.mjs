#!/usr/bin/env node
// Builds the web console (console/) into dist/console: TypeScript modules compiled by tsc (no
// bundler; the browser loads them as ES modules) plus the static HTML and CSS copied as they are.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'console');
mkdirSync(out, { recursive: true });
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const build = spawnSync(process.execPath, [tsc, '-p', join(root, 'console', 'tsconfig.json')], { stdio: 'inherit', cwd: root });
if (build.status !== 0) {
  console.error('console build failed');
  process.exit(build.status ?? 1);
}
cpSync(join(root, 'console', 'static'), out, { recursive: true });
