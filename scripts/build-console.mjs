#!/usr/bin/env node
// Builds the web console (console/) into dist/console: TypeScript modules compiled by tsc (no
// bundler; the browser loads them as ES modules) plus the static HTML and CSS copied as they are.
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'console');
mkdirSync(out, { recursive: true });
// Built aside, then each file put in place by a rename: a browser loading the console while another
// build runs (the console's test files each build it, two at a time) never reads a half-written module.
const staging = mkdtempSync(join(root, 'dist', '.console-build-'));
try {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', join(root, 'console', 'tsconfig.json'), '--outDir', staging], { stdio: 'inherit', cwd: root });
  if (build.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    console.error('console build failed');
    process.exit(build.status ?? 1);
  }
  cpSync(join(root, 'console', 'static'), staging, { recursive: true });
  for (const entry of readdirSync(staging, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const from = join(entry.parentPath, entry.name);
    const to = join(out, relative(staging, from));
    mkdirSync(dirname(to), { recursive: true });
    const temporary = `${to}.${process.pid}.tmp`;
    copyFileSync(from, temporary);
    renameSync(temporary, to);
  }
} finally {
  rmSync(staging, { recursive: true, force: true });
}
