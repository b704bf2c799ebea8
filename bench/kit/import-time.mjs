// Prints how long importing each kit entry point takes, from the compiled output (`npm run build`
// first), each in a fresh process, median of several runs. kit/core must stay cheap (under 50 ms;
// it loads no package): plugins and the edge import it. docs/contributing.md records the figures.
// Usage: node bench/kit/import-time.mjs [runs]
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const runs = Number(process.argv[2] ?? 7);
const entries = ['core', 'settings', 'http', 'identity', 'data', ''];
const root = join(import.meta.dirname, '..', '..', 'dist', 'services', 'kit');
if (!existsSync(join(root, 'core', 'index.js'))) {
  console.error('dist/ is missing: run npm run build first');
  process.exit(1);
}
// Wall time, and the process's CPU time over the import (less sensitive to a busy machine).
const probe = (file) =>
  `const c = process.cpuUsage(); const t = performance.now(); await import(${JSON.stringify(file)}); const u = process.cpuUsage(c);` +
  `console.log(JSON.stringify({ wall: performance.now() - t, cpu: (u.user + u.system) / 1000 }));`;
const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
const [load] = (await import('node:os')).loadavg();
console.log(`load average ${load.toFixed(1)}; ${runs} fresh processes per entry; medians`);
const report = (label, specifier) => {
  const samples = [];
  for (let i = 0; i < runs; i++) samples.push(JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', probe(specifier)], { cwd: join(root, '..', '..', '..'), encoding: 'utf8' })));
  const wall = median(samples.map((s) => s.wall));
  const cpu = median(samples.map((s) => s.cpu));
  console.log(label.padEnd(14), `wall ${wall.toFixed(1).padStart(7)} ms   cpu ${cpu.toFixed(1).padStart(7)} ms`);
};
for (const entry of entries) report(`kit${entry ? `/${entry}` : ''}`, join(root, entry, 'index.js'));
// For reference: the one package kit/settings and the services load first.
report('zod (alone)', 'zod');
