import { spawnSync } from 'node:child_process';
import test from 'ava';

// One place whose objects nearly all outlive young collections: with allocation-site pretenuring
// on, V8 then allocates that place's next objects straight in the old generation. The check runs in
// a child process (its own heap and V8 flags), which reports whether a fresh object is young.
const WORKLOAD = `
function make(i) { return { a: i, b: [i, i + 1], c: { d: i } }; }
const keep = [];
for (let round = 0; round < 20; round++) {
  for (let i = 0; i < 20000; i++) keep.push(make(i));
  gc({ type: 'minor' });
}
console.log(eval('%InYoungGeneration(make(1))') ? 'young' : 'old');
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

test('without the tuning, the workload gets its objects pretenured (so the next test can fail)', (t) => {
  t.is(freshObjectIn(''), 'old');
});

test('a process that opened its runtime keeps allocating such objects in the young generation', (t) => {
  const prelude = `
import { openProcessRuntime } from './services/kit/runtime.ts';
import { loadBaseConfig } from './services/kit/settings/index.ts';
const runtime = openProcessRuntime(loadBaseConfig(), { name: 'heap-tuning-test' });
await runtime.close();
`;
  t.is(freshObjectIn(prelude), 'young');
});
