/**
 * `node --import tsx bench/idle.ts` (after `npm run build`): the CPU an idle platform spends, by
 * thread, in both modes: the platform as the bench starts it, one provider registered, 5 s to
 * settle, then 10 s with no request (polls, timers, metrics, the collector). Prints ms of CPU per
 * second for the whole process and each thread ("main", the others by thread id: the PGlite worker
 * and V8's helpers). Extra settings for both platforms as JSON in BENCH_IDLE_ENV.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { startPlatform, startUpstream, threadCpuMs } from './lib/procs.js';

const extraEnv = JSON.parse(process.env.BENCH_IDLE_ENV ?? '{}') as Record<string, string>;
const upstream = await startUpstream();
try {
  for (const mode of ['embedded', 'production'] as const) {
    const platform = await startPlatform(mode, extraEnv);
    try {
      await platform.addProviders(upstream, [0]);
      await sleep(5000);
      const before = await threadCpuMs(platform.pid);
      await sleep(10_000);
      const after = await threadCpuMs(platform.pid);
      const spent = Object.entries(after)
        .map(([tid, ms]) => [tid === String(platform.pid) ? 'main' : tid, (ms - (before[tid] ?? 0)) / 10] as const)
        .filter(([, perSecond]) => perSecond > 0);
      const total = spent.reduce((sum, [, perSecond]) => sum + perSecond, 0);
      console.log(`${mode}: ${total.toFixed(1)} ms of CPU per second idle (${spent.map(([name, perSecond]) => `${name} ${perSecond.toFixed(1)}`).join(', ')})`);
    } finally {
      await platform.stop();
    }
  }
} finally {
  await upstream.stop();
}
