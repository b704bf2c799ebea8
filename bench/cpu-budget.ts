/**
 * `node --import tsx bench/cpu-budget.ts` (after `npm run build`): how much main-thread CPU per
 * request a Node relay may spend on this machine, at this hour, and still meet the throughput and
 * event-loop targets of `npm run bench` (≥ 70 % of direct, event-loop p99 ≤ 5 ms under load, both at
 * 64 connections behind the 20 ms provider), and how our platform compares with a relay that spends
 * as much. Both targets follow the CPU a request costs, but not in proportion: the closer the main
 * thread is to full, the more requests share one turn of the loop. This measures that curve instead
 * of assuming it.
 *
 * The relays are copies of the floor (`bench/floor/proxy.mjs`: a bare Node relay), each spinning a
 * fixed time per request on its main thread (`FLOOR_SPIN_US`), so only the CPU per request differs
 * between them; the embedded platform runs beside them in the same interleaved rounds. Each row
 * prints what was measured, the CPU per request of the main thread and of the process's other
 * threads included, and of the busiest of those alone (the platform's database worker). The spin
 * is wall time: on a busy machine it costs more or less CPU than asked, so the rows are read by
 * their measured CPU. The budget is the costliest relay without work on a
 * second thread that met a target; our platform's distance from it is the cut still needed.
 *   --relays "0,100,200,300,450"  one relay each: busy µs per request, or `µs/KiB/KiB[/µs]` to also
 *                  allocate that many KiB per request in small objects, the second figure of which stay
 *                  reachable until the answer, and to have a second thread spend the last figure per
 *                  request once a second (`300/56/17/100`: about what a platform request allocates and
 *                  keeps, bench/alloc.ts and bench/inflight.ts, and what its database thread spends)
 *   --platforms "KEY=value,…;KEY=value,…"  more embedded platforms beside the default one, one per
 *                  `;`-separated group of settings (an ablation: what a feature does to the figures)
 *   --rounds N (3)  --seconds S (6)  --connections C (64)  --no-platform (relays only)
 */
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { directTarget, eventLoopP99, median, platformTarget, relayTarget, throughput, type Target } from './lib/load.js';
import { busiestOtherThreadMs, machineBusyMs, parseEnvPairs, processCpuMs, startFloor, startPlatform, startUpstream, type Proc } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    relays: { type: 'string', default: '0,100,200,300,450' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '6' },
    connections: { type: 'string', default: '64' },
    'no-platform': { type: 'boolean', default: false },
    platforms: { type: 'string', default: '' },
  },
});
const relaySpecs = args.relays.split(',');
const rounds = Number(args.rounds);
const seconds = Number(args.seconds);
const connections = Number(args.connections);
const DELAY_MS = 20;
const fmt = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : '—');

interface Path {
  target: Target;
  /** A relay's work on its second thread, µs per request (0: none, as the budget's relays). */
  backgroundMicros?: number;
  /** The process whose main thread is measured; none for direct. */
  pid?: number;
  metricsUrl?: string;
}

interface Sample {
  rps: number;
  cpuMs: number;
  /** CPU per request of the process's other threads (a database worker, the collector's helpers). */
  otherMs: number;
  /** … of which the busiest other thread's (the embedded database's worker, in our platform). */
  busiestOtherMs: number;
  mainBusy: number;
  machineBusy: number;
  loopP99: number;
}

async function main() {
  const procs: Proc[] = [];
  try {
    const upstream = await startUpstream();
    procs.push(upstream);
    const paths: Path[] = [{ target: directTarget(upstream) }];
    for (const spec of relaySpecs) {
      const figures = spec.split('/').map(Number);
      if (figures.length > 4 || !figures.every((n) => Number.isFinite(n) && n >= 0)) throw new Error(`--relays: "${spec}" is not µs or µs/KiB/KiB/µs`);
      const [spinMicros = 0, allocKiB = 0, keepKiB = 0, backgroundMicros = 0] = figures;
      const relay = await startFloor(upstream, { spinMicros, allocKiB, keepKiB, backgroundMicros }, `relay ${spec}`);
      procs.push(relay);
      paths.push({
        backgroundMicros,
        target: relayTarget(relay),
        pid: relay.pid,
        metricsUrl: `${relay.url}/metrics`,
      });
    }
    const settings = args['no-platform'] ? [] : ['', ...args.platforms.split(';').filter(Boolean)];
    for (const env of settings) {
      const platform = await startPlatform('embedded', parseEnvPairs(env), env ? `embedded ${env}` : 'embedded');
      procs.push(platform);
      await platform.addProviders(upstream, [DELAY_MS]);
      paths.push({ target: platformTarget(platform), pid: platform.pid, metricsUrl: `${platform.llmUrl}/metrics` });
    }
    // One short load per path first: connections open, code warms, the catalog is synced.
    for (const path of paths) await throughput(path.target, { connections, seconds: 1, delayMs: DELAY_MS });

    const samples = new Map<string, Sample[]>(paths.map((p) => [p.target.name, []]));
    for (let r = 0; r < rounds; r++) {
      const rotated = paths.map((_, i) => paths[(i + r) % paths.length]!);
      for (const path of rotated) {
        const cpuMs = async () => (path.pid ? processCpuMs(path.pid) : { main: Number.NaN, all: Number.NaN, threads: {} });
        if (path.metricsUrl) await eventLoopP99(path.metricsUrl); // resets the window
        const before = await cpuMs();
        const machineBefore = await machineBusyMs();
        const started = performance.now();
        const result = await throughput(path.target, { connections, seconds, delayMs: DELAY_MS });
        const elapsedMs = performance.now() - started;
        const machineAfter = await machineBusyMs();
        const after = await cpuMs();
        const requests = result.rps * (elapsedMs / 1000);
        samples.get(path.target.name)!.push({
          rps: result.rps,
          cpuMs: (after.main - before.main) / requests,
          otherMs: (after.all - after.main - (before.all - before.main)) / requests,
          busiestOtherMs: path.pid ? busiestOtherThreadMs(path.pid, before.threads, after.threads) / requests : Number.NaN,
          mainBusy: (after.main - before.main) / elapsedMs,
          machineBusy: (machineAfter - machineBefore) / elapsedMs / cpus().length,
          loopP99: path.metricsUrl ? await eventLoopP99(path.metricsUrl) : Number.NaN,
        });
        if (result.errors) console.log(`${path.target.name}: ${result.errors} errors`);
      }
      console.log(`round ${r + 1}/${rounds}: ${rotated.map((p) => `${p.target.name} ${fmt(samples.get(p.target.name)!.at(-1)!.rps, 0)} req/s`).join(' | ')}`);
    }

    const directRps = median(samples.get('direct')!.map((s) => s.rps));
    const rows = paths.map((p) => {
      const s = samples.get(p.target.name)!;
      const row = {
        name: p.target.name,
        cpuMs: median(s.map((x) => x.cpuMs)),
        otherMs: median(s.map((x) => x.otherMs)),
        busiestOtherMs: median(s.map((x) => x.busiestOtherMs)),
        rps: median(s.map((x) => x.rps)),
        mainBusy: median(s.map((x) => x.mainBusy)),
        machineBusy: median(s.map((x) => x.machineBusy)),
        loopP99: median(s.map((x) => x.loopP99)),
      };
      return { ...row, backgroundMicros: p.backgroundMicros, ofDirect: row.rps / directRps, perTurn: row.loopP99 / row.cpuMs };
    });
    console.log(`\n## medians of ${rounds} interleaved rounds, ${connections} connections, ${DELAY_MS} ms provider, ${seconds} s each`);
    console.log('path                CPU/request, ms: main thread / other threads (busiest one)   req/s   of direct   main thread / machine busy, %   event-loop p99, ms   requests per turn (p99 / CPU)');
    for (const row of rows) {
      console.log(
        `${row.name.padEnd(20)}${`${fmt(row.cpuMs, 3)} / ${fmt(row.otherMs, 3)} (${fmt(row.busiestOtherMs, 3)})`.padStart(58)}${fmt(row.rps, 0).padStart(8)}${`${fmt(row.ofDirect * 100, 0)} %`.padStart(12)}${`${fmt(row.mainBusy * 100, 0)} / ${fmt(row.machineBusy * 100, 0)}`.padStart(32)}${fmt(row.loopP99).padStart(21)}${fmt(row.perTurn, 0).padStart(32)}`,
      );
    }
    // The budget is read off the relays that do all their work on the main thread.
    const relays = rows.filter((r) => r.backgroundMicros === 0).sort((a, b) => a.cpuMs - b.cpuMs);
    const budget = (ok: (r: (typeof rows)[number]) => boolean) => {
      const met = relays.filter(ok);
      const missed = relays.filter((r) => !ok(r));
      const within = met.length ? Math.max(...met.map((r) => r.cpuMs)) : Number.NaN;
      const beyond = missed.length ? Math.min(...missed.map((r) => r.cpuMs)) : Number.NaN;
      return `met up to ${fmt(within, 3)} ms per request${Number.isFinite(beyond) ? `, missed from ${fmt(beyond, 3)}` : ''}`;
    };
    console.log(`\nbudget at this hour: ≥ 70 % of direct ${budget((r) => r.ofDirect >= 0.7)}; event-loop p99 ≤ 5 ms ${budget((r) => r.loopP99 <= 5)}`);
    for (const platform of rows.filter((r) => r.name.startsWith('embedded'))) {
      console.log(`${platform.name}: ${fmt(platform.cpuMs, 3)} ms per request, ${fmt(platform.ofDirect * 100, 0)} % of direct, event-loop p99 ${fmt(platform.loopP99)} ms`);
    }
  } finally {
    for (const proc of procs.reverse()) await proc.stop().catch(() => {});
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
