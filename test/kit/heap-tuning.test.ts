import { spawnSync } from 'node:child_process';
import test from 'ava';

// One place whose objects nearly all outlive young collections: with allocation-site pretenuring
// on, V8 then allocates that place's next objects straight in the old generation. The check runs in
// a child process (its own heap and V8 flags), which reports whether a fresh object is young. When V8
// decides depends on its compiler's timing (round 6 on an idle machine, later or never under CI load),
// so the child keeps going until a fresh object is old, or up to 300 rounds. Without the tuning the
// same child reports "old" in most runs (the assertion below then fails), but not in every run, so
// that direction is not a test of its own.
const WORKLOAD = `
const inYoungGeneration = new Function('o', 'return %InYoungGeneration(o)');
function make(i) { return { a: i, b: [i, i + 1], c: { d: i } }; }
function run() {
  const keep = [];
  for (let round = 0; round < 300; round++) {
    for (let i = 0; i < 20000; i++) keep.push(make(i));
    if (keep.length >= 400000) keep.length = 0;
    gc({ type: 'minor' });
    if (!inYoungGeneration(make(1))) return 'old';
  }
  return 'young';
}
console.log(run());
`;

function freshObjectIn(prelude: string): string {
  const child = spawnSync(process.execPath, ['--allow-natives-syntax', '--expose-gc', '--import', 'tsx', '--input-type=module', '-e', prelude + WORKLOAD], {
    cwd: process.cwd(),
    encoding: 'utf8',
    env: { ...process.env, LOG_LEVEL: 'silent' },
  });
  if (child.status !== 0) throw new Error(`child failed: ${child.stderr}`);
  return child.stdout.trim().split('\n').at(-1)!;
}

test('a process that opened its runtime keeps allocating such objects in the young generation', (t) => {
  const prelude = `
import { openProcessRuntime } from './services/kit/runtime.ts';
import { loadBaseConfig } from './services/kit/settings/index.ts';
const runtime = openProcessRuntime(loadBaseConfig(), { name: 'heap-tuning-test' });
await runtime.close();
`;
  t.is(freshObjectIn(prelude), 'young');
});
