import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import test from 'ava';
import { REPOSITORY_ROOT } from '../helpers/repository.js';

// The contributor guide forbids sleeps as synchronisation: on a loaded 2-core CI machine a fixed
// pause is either too short (flaky) or too long (slow). Waits go through test/helpers/wait.ts
// (a bounded poll on a condition), an event, or an injectable clock. This test keeps the rule.
const ROOT = REPOSITORY_ROOT;

/** Files whose timers simulate something rather than synchronise a test, with why. */
const SIMULATIONS: Record<string, string> = {
  'test/helpers/wait.ts': 'the bounded poll itself',
  'test/fakes/openai-upstream.ts': 'a fake upstream answering slowly on purpose (#delay, #slow)',
  'test/architecture/test-rules.test.ts': 'the examples of what this test finds',
};

const SLEEPS: Array<[string, RegExp]> = [
  ['await new Promise(r => setTimeout(r, …))', /await\s+new\s+Promise(?:<[^>]*>)?\(\s*\(?\s*(\w+)\s*\)?\s*=>\s*setTimeout\(\s*\1\s*,/],
  ['sleep(…)', /(?<![.\w'"])sleep\(/],
  ['delay(…)', /(?<![.\w'"])delay\(/],
  ['timers/promises', /from\s+['"](?:node:)?timers\/promises['"]/],
];

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : testFiles(path);
    return /\.(?:ts|mts|mjs|js)$/.test(entry.name) ? [relative(ROOT, path)] : [];
  });
}

function sleepsIn(source: string): string[] {
  return source.split('\n').flatMap((line, i) => SLEEPS.filter(([, pattern]) => pattern.test(line)).map(([name]) => `${i + 1}: ${name}`));
}

test('the pattern finds the sleeps it is meant to find, and not bounded waits or sandboxed code', (t) => {
  t.deepEqual(sleepsIn('    await new Promise((r) => setTimeout(r, 25));'), ['1: await new Promise(r => setTimeout(r, …))']);
  t.deepEqual(sleepsIn('await new Promise<void>((resolve) => setTimeout(resolve, 10));'), ['1: await new Promise(r => setTimeout(r, …))']);
  t.deepEqual(sleepsIn("import { setTimeout as sleep } from 'node:timers/promises';\nawait sleep(20);"), ['1: timers/promises', '2: sleep(…)']);
  t.deepEqual(sleepsIn('const timer = setTimeout(resolve, remaining);'), [], 'a bound on an event wait');
  t.deepEqual(sleepsIn("code: 'import time; time.sleep(3)'"), [], 'Python run in the sandbox');
  t.deepEqual(sleepsIn("'hello #delay:30'"), []);
});

test('no test file sleeps as synchronisation (use waitFor, an event or an injectable clock)', (t) => {
  const files = testFiles(join(ROOT, 'test')).filter((file) => !(file in SIMULATIONS));
  t.true(files.length > 100, `${files.length} files scanned`);
  const found = files.flatMap((file) => sleepsIn(readFileSync(join(ROOT, file), 'utf8')).map((hit) => `${file}:${hit}`));
  t.deepEqual(found, []);
});
