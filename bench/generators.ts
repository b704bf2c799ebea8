/**
 * `node --import tsx bench/generators.ts` (after `npm run build`, with wrk installed: `apt-get install wrk`): does the load
 * generator move the figures? The 64-connection phase of `npm run bench` on direct, our platform
 * (embedded and production drivers) and Portkey, driven by wrk and by autocannon in alternating
 * rounds, so both generators meet the same hour. Per generator, medians over rounds of each path's
 * requests/s, its share of direct and its ratio to Portkey, and the generator's own CPU per request.
 *   --rounds N (4)   --seconds S (6)   --modes embedded,production
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { directTarget, LOAD_GENERATORS, median, platformTarget, portkeyTarget, throughput, type LoadGenerator, type Target } from './lib/load.js';
import { startPlatform, startPortkey, startUpstream, type PlatformMode, type Proc } from './lib/procs.js';

const { values: args } = parseArgs({
  options: { rounds: { type: 'string', default: '4' }, seconds: { type: 'string', default: '6' }, modes: { type: 'string', default: 'embedded,production' } },
});

/**
 * The generator's CPU, ms: this process's own (autocannon runs in it) plus that of its ended
 * children (wrk runs as one), from /proc/self/stat's cutime and cstime (clock ticks of 10 ms).
 */
async function generatorCpuMs(): Promise<number> {
  const fields = (await readFile('/proc/self/stat', 'utf8')).split(') ')[1]!.split(' ');
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000 + (Number(fields[13]) + Number(fields[14])) * 10;
}

const procs: Proc[] = [];
try {
  const upstream = await startUpstream();
  procs.push(upstream);
  const platforms = await Promise.all(args.modes!.split(',').map((m) => startPlatform(m as PlatformMode)));
  procs.push(...platforms);
  const peer = await startPortkey();
  procs.push(peer);
  for (const p of platforms) await p.addProviders(upstream, [20]);
  const targets: Target[] = [
    directTarget(upstream),
    ...platforms.map((p) => platformTarget(p)),
    portkeyTarget(peer, upstream),
  ];
  const rps = new Map<string, number[]>();
  const cpuPerRequest = new Map<LoadGenerator, number[]>();
  for (let r = 0; r < Number(args.rounds); r++) {
    const order = r % 2 ? [...LOAD_GENERATORS].reverse() : [...LOAD_GENERATORS];
    for (const generator of order) {
      const line: string[] = [];
      for (const t of targets) {
        const cpuBefore = await generatorCpuMs();
        const result = await throughput(t, { connections: 64, seconds: Number(args.seconds), delayMs: 20, generator });
        const perRequest = ((await generatorCpuMs()) - cpuBefore) / (result.rps * Number(args.seconds));
        cpuPerRequest.set(generator, [...(cpuPerRequest.get(generator) ?? []), perRequest]);
        const key = `${generator} ${t.name}`;
        rps.set(key, [...(rps.get(key) ?? []), result.rps]);
        line.push(`${t.name} ${result.rps.toFixed(0)}${result.errors ? ` (${result.errors} errors)` : ''}`);
      }
      console.log(`round ${r + 1} ${generator}: ${line.join(' | ')}`);
    }
  }
  const perRound = (generator: LoadGenerator, name: string, over: string) =>
    median(rps.get(`${generator} ${name}`)!.map((v, i) => v / rps.get(`${generator} ${over}`)![i]!));
  for (const generator of LOAD_GENERATORS) console.log(`${generator}: ${(1000 * median(cpuPerRequest.get(generator)!)).toFixed(1)} µs of its own CPU per request (median over paths and rounds)`);
  console.log('\npath           generator    req/s (median)  share of direct  ×Portkey');
  for (const t of targets) {
    for (const generator of LOAD_GENERATORS) {
      console.log(
        `${t.name.padEnd(14)} ${generator.padEnd(12)} ${median(rps.get(`${generator} ${t.name}`)!).toFixed(0).padStart(14)}  ${(100 * perRound(generator, t.name, 'direct')).toFixed(0).padStart(14)} %  ${perRound(generator, t.name, 'portkey').toFixed(2).padStart(8)}`,
      );
    }
  }
} finally {
  for (const p of procs.reverse()) await p.stop();
}
