#!/usr/bin/env node
// `npm test`: make sure PostgreSQL, RabbitMQ and Redis answer (starting them when installed),
// run the suite (parallel files, then the serial restart tests), print the reliability figures
// (test/reliability) as one table, and end with `N passed, N failed`.
// `npm run test:reliability` runs test/reliability only (same table, same last line).
// The files run from a compiled copy of the repository (scripts/test-tree.mjs: no TypeScript
// loader in the test processes); `TEST_TREE=source` runs them from the repository through tsx.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const servers = spawnSync('bash', [join(root, 'scripts', 'ensure-servers.sh')], { stdio: 'inherit' });
if (servers.status !== 0) {
  console.log('0 passed, 1 failed');
  process.exit(1);
}

const extra = process.argv.slice(2).map((a) => (a === '--reliability' ? 'test/reliability/**/*.test.ts' : a));
const { clearFigures, readFigures, renderTable } = await import('./reliability-table.mjs');
const { buildTestTree, removeTestTree } = await import('./test-tree.mjs');
const ava = join(root, 'node_modules', 'ava', 'entrypoints', 'cli.mjs');
const compiled = process.env.TEST_TREE !== 'source';
// Read by ava.config.mjs (here and in every test process) and by test/helpers/process.ts.
process.env.TEST_TREE = compiled ? 'compiled' : 'source';
const { ext, nodeArguments } = await import('../ava.config.mjs');
const tree = compiled ? await buildTestTree(root) : root;
// Where the files' cleanups record their RabbitMQ queue prefixes (test/helpers/amqp.ts): the run
// lists and deletes those queues once, at its end, instead of once per cleanup.
const scratch = mkdtempSync(join(tmpdir(), 'ai-gateway-test-run-'));
const queueLedger = join(scratch, 'amqp-queue-prefixes');
// The tree and the ledger go with the run, however it ends.
process.on('exit', () => {
  if (compiled) removeTestTree(tree);
  rmSync(scratch, { recursive: true, force: true });
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));
// In the compiled tree a test file is its JavaScript: `test/kit/x.test.ts` (or ava's
// `test/kit/x.test.ts:12`, the test at that line) names `test/kit/x.test.js`.
const inTree = (arg) => (arg.startsWith('-') ? arg : arg.replace(/\.ts(?=$|:[\d,-]+$)/, `.${ext}`));
let passed = 0;
let failed = 0;

function run(configFile, args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [ava, '--config', join(tree, configFile), '--tap', ...args.map(inTree)], {
      cwd: tree,
      env: { ...process.env, NODE_ENV: 'test', TEST_SOURCE_ROOT: root, TEST_AMQP_QUEUE_LEDGER: queueLedger },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let buffer = '';
    let sawPlan = false;
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      buffer += chunk.toString();
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (/^ok \d+/.test(line)) passed++;
        else if (/^not ok \d+/.test(line)) failed++;
        else if (/^1\.\.\d+/.test(line)) sawPlan = true;
      }
    });
    child.on('close', (code) => {
      // A crashed run (exit != 0 without failing tests, e.g. a file that could not load) still fails.
      if (code !== 0 && failed === 0) failed++;
      if (!sawPlan && code === 0) failed++;
      resolve(code);
    });
  });
}

const onlyFiles = extra.filter((a) => !a.startsWith('-'));
// Figures of an earlier run must not pass for this one's.
const runsReliability = onlyFiles.length === 0 || onlyFiles.some((f) => f.replace(/^\.\//, '').startsWith('test/reliability'));
if (runsReliability) clearFigures();
// The reliability suites that restart servers of their own run with the serial suites (see
// ava.serial.config.mjs): named alone, they run there only; a pattern over test/reliability (as
// --reliability gives) runs the rest in parallel first, then these alone.
const isRestartSuite = (f) => /^test\/reliability\/(.*\/)?[^/*]*-restart\.test\.ts$/.test(f.replace(/^\.\//, ''));
const coversRestartSuites = (f) => {
  const file = f.replace(/^\.\//, '');
  return isRestartSuite(file) || (file.startsWith('test/reliability') && (file.includes('*') || !file.endsWith('.ts')));
};
const flags = extra.filter((a) => a.startsWith('-'));
if (onlyFiles.length > 0) {
  const parallelFiles = onlyFiles.filter((f) => !isRestartSuite(f));
  const serialFilters = onlyFiles.filter(coversRestartSuites);
  if (parallelFiles.length > 0) await run('ava.config.mjs', [...flags, ...parallelFiles]);
  if (serialFilters.length > 0) await run('ava.serial.config.mjs', [...flags, ...serialFilters]);
} else {
  await run('ava.config.mjs', extra);
  const serialDir = join(root, 'test', 'serial');
  const serialFiles = existsSync(serialDir) ? readdirSync(serialDir, { recursive: true }).filter((f) => String(f).endsWith('.test.ts')) : [];
  const reliabilityDir = join(root, 'test', 'reliability');
  const restartFiles = existsSync(reliabilityDir) ? readdirSync(reliabilityDir, { recursive: true }).filter((f) => isRestartSuite(`test/reliability/${f}`)) : [];
  if (serialFiles.length + restartFiles.length > 0) await run('ava.serial.config.mjs', extra);
}
spawnSync(process.execPath, [...nodeArguments, `test/helpers/amqp-sweep.${ext}`, queueLedger], { cwd: tree, stdio: 'inherit', timeout: 120_000 });
const figures = readFigures();
if (figures.length > 0) console.log('\nReliability figures (test/reliability)\n' + renderTable(figures) + '\n');
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
