/**
 * `node --import tsx bench/tail-ab.ts` (after `npm run build`): the 1-connection latency of two
 * embedded platforms that differ in build, Node flags or settings, each measured beside direct alone
 * (the bench's "beside direct alone" reading: one request to direct, one to the platform, in turn),
 * the two sides alternating round by round so drift hits both alike. Prints each round's added
 * p50 / p90 / p99 / p99.9 over direct and the medians over rounds: what a change does to the tail that
 * `npm run bench` reads at 1 connection, where throughput figures cannot see it.
 *   --a DIR --b DIR                    compiled trees (default: dist for both)
 *   --a-node-args=…, --b-node-args=…   Node flags of one side, after npm start's own (they win)
 *   --a-env, --b-env "KEY=value,…"     settings of one side
 *   --rounds N (6)   --requests N (2000 per side per round)   --stream
 */
import { parseArgs } from 'node:util';
import { addedBesideDirect, directTarget, median, platformTarget } from './lib/load.js';
import { startUpstream } from './lib/procs.js';
import { describeSide, SIDE_OPTIONS, startSides, type Side } from './lib/sides.js';

const { values: args } = parseArgs({
  options: {
    ...SIDE_OPTIONS,
    a: { type: 'string', default: 'dist' },
    rounds: { type: 'string', default: '6' },
    requests: { type: 'string', default: '2000' },
    stream: { type: 'boolean', default: false },
  },
});

const PERCENTILES = [50, 90, 99, 99.9];

const upstream = await startUpstream();
const sides: Side[] = [];
try {
  await startSides(args, 'embedded', upstream, [0], sides);
  const direct = directTarget(upstream);
  const n = Number(args.requests);
  const added = new Map<Side, number[][]>(sides.map((side) => [side, []]));
  for (let round = 0; round < Number(args.rounds); round++) {
    const order = round % 2 === 0 ? sides : [...sides].reverse();
    const line: string[] = [];
    for (const side of order) {
      const row = await addedBesideDirect(direct, platformTarget(side.platform, side.label), { n, warmup: 200, stream: args.stream!, percentiles: PERCENTILES });
      added.get(side)!.push(row);
      line.push(`${side.label} ${row.map((v) => v.toFixed(2)).join(' / ')}`);
    }
    console.log(`round ${round + 1}, added p50 / p90 / p99 / p99.9 ms: ${line.join(' | ')}`);
  }
  console.log('\nmedians over rounds, added ms (p50 / p90 / p99 / p99.9):');
  for (const side of sides) console.log(`  ${describeSide(side)}: ${PERCENTILES.map((_, i) => median(added.get(side)!.map((row) => row[i]!)).toFixed(2)).join(' / ')}`);
} finally {
  for (const side of sides) await side.platform.stop();
  await upstream.stop();
}
