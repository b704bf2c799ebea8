/**
 * `node --import tsx bench/held-cpu.ts` (after `npm run build`): what relaying one chunk of a held
 * stream costs. `npm run bench`'s ramp finds how many streams a path holds before one stalls; on two
 * cores the CPU the relayed chunks take is part of that ceiling (each held stream gets a chunk every
 * 500 ms, so 10 000 streams are 20 000 chunks a second), beside descriptors and the CPU of admitting
 * new streams. Here every path holds the same `--streams` at once
 * (opened in bursts of 250), and once all are open the CPU of the serving process is read over
 * `--window` seconds: main thread and whole process, per relayed chunk, beside the floor (a bare Node
 * relay, `bench/floor/proxy.mjs`) in the same rounds. Each round's line also gives, per chunk, the
 * CPU of the fake provider that writes it and of this process, the client that reads it: the rest of
 * what a held stream costs the two shared cores. Two sides of the platform (builds, Node flags,
 * settings) as in `bench/cpu-ab.ts`; both default to `dist` (an A/A run shows the spread).
 *   --a DIR --b DIR   --a-node-args=…   --b-node-args=…   --a-env / --b-env "KEY=value,…"
 *   --streams N (2000)   --window S (4)   --interval MS (500, between two chunks of a stream)
 *   --rounds N (4)   --mode embedded|production (embedded)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { median, platformTarget, relayTarget, whileHeld, type Target } from './lib/load.js';
import { processCpuMs, startFloor, startUpstream, type PlatformMode } from './lib/procs.js';
import { describeSide, SIDE_OPTIONS, startSides, type Side } from './lib/sides.js';

const { values: args } = parseArgs({
  options: {
    ...SIDE_OPTIONS,
    a: { type: 'string', default: 'dist' },
    streams: { type: 'string', default: '2000' },
    window: { type: 'string', default: '4' },
    interval: { type: 'string', default: '500' },
    rounds: { type: 'string', default: '4' },
    mode: { type: 'string', default: 'embedded' },
  },
});

const streams = Number(args.streams);
const windowMs = Number(args.window) * 1000;
const intervalMs = Number(args.interval);

interface Path {
  label: string;
  target: Target;
  pid: number;
}

const upstream = await startUpstream();
const sides: Side[] = [];
const floor = await startFloor(upstream);
try {
  await startSides(args, args.mode as PlatformMode, upstream, [0], sides);
  const paths: Path[] = [
    ...sides.map((side) => ({ label: describeSide(side), target: platformTarget(side.platform, side.label), pid: side.platform.pid })),
    { label: 'floor', target: relayTarget(floor), pid: floor.pid },
  ];
  const perChunk = new Map<Path, { main: number[]; all: number[] }>(paths.map((path) => [path, { main: [], all: [] }]));
  console.log(`${streams} streams held at once, a chunk each every ${intervalMs} ms, CPU read over ${windowMs / 1000} s once all are open`);
  for (let round = 0; round < Number(args.rounds); round++) {
    const order = round % 2 === 0 ? paths : [...paths].reverse();
    const line: string[] = [];
    for (const path of order) {
      const { value: spent, held: result } = await whileHeld(path.target, { streams, intervalMs, windowMs }, async () => {
        const before = await processCpuMs(path.pid);
        const providerBefore = await processCpuMs(upstream.pid);
        const clientBefore = process.cpuUsage();
        await sleep(windowMs);
        const client = process.cpuUsage(clientBefore);
        const providerAfter = await processCpuMs(upstream.pid);
        const after = await processCpuMs(path.pid);
        return { main: after.main - before.main, all: after.all - before.all, provider: providerAfter.all - providerBefore.all, client: (client.user + client.system) / 1000 };
      });
      const relayed = (streams * windowMs) / intervalMs;
      const main = (spent.main * 1000) / relayed;
      const all = (spent.all * 1000) / relayed;
      perChunk.get(path)!.main.push(main);
      perChunk.get(path)!.all.push(all);
      const trouble = result.failed || result.stalled ? ` (${result.stalled} stalled, ${result.failed} failed)` : '';
      line.push(`${path.label.split(' ')[0]} ${main.toFixed(1)} / ${all.toFixed(1)} µs (provider ${((spent.provider * 1000) / relayed).toFixed(1)}, client ${((spent.client * 1000) / relayed).toFixed(1)})${trouble}`);
    }
    console.log(`round ${round + 1}, main thread / process CPU per relayed chunk: ${line.join(' | ')}`);
  }
  const floorMain = median(perChunk.get(paths.at(-1)!)!.main);
  console.log('\nmedians over rounds, CPU per relayed chunk (main thread / whole process, µs; main thread against the floor):');
  for (const path of paths) {
    const { main, all } = perChunk.get(path)!;
    console.log(`  ${path.label}: ${median(main).toFixed(1)} / ${median(all).toFixed(1)} (${(median(main) / floorMain).toFixed(2)}× the floor)`);
  }
} finally {
  for (const side of sides) await side.platform.stop();
  await floor.stop();
  await upstream.stop();
}
