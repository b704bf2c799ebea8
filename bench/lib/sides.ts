import { parseEnvPairs, startPlatform, type Platform, type PlatformMode, type Upstream } from './procs.js';

/**
 * The options of a bench that compares two sides of the platform (`bench/cpu-ab.ts`,
 * `bench/tail-ab.ts`): a compiled tree, Node flags and settings for each, A and B.
 */
export const SIDE_OPTIONS = {
  a: { type: 'string', default: 'dist-before' },
  b: { type: 'string', default: 'dist' },
  'a-node-args': { type: 'string', default: '' },
  'b-node-args': { type: 'string', default: '' },
  'a-env': { type: 'string', default: '' },
  'b-env': { type: 'string', default: '' },
} as const;

export interface Side {
  label: string;
  dir: string;
  nodeArgs: string;
  /** Its settings as given (`--a-env`/`--b-env`). */
  env: string;
  platform: Platform;
}

/** What sets a side apart, for the rows that report it: label, tree, Node flags, settings. */
export const describeSide = (side: Side): string => [side.label, side.dir, side.nodeArgs, side.env].filter(Boolean).join(' ');

/**
 * Starts side A, then side B, each from its tree with its own Node flags (after npm start's and
 * BENCH_PLATFORM_NODE_ARGS's, so they win for a flag given twice) and settings, with providers at
 * `delays` ms on `upstream`. Each side is added to `started` as soon as it runs, so the caller's
 * `finally` stops it even when the other fails to start.
 */
export async function startSides(
  args: { a?: string; b?: string; 'a-node-args'?: string; 'b-node-args'?: string; 'a-env'?: string; 'b-env'?: string },
  mode: PlatformMode,
  upstream: Upstream,
  delays: number[],
  started: Side[],
): Promise<void> {
  const shared = process.env.BENCH_PLATFORM_NODE_ARGS ?? '';
  try {
    for (const label of ['A', 'B'] as const) {
      const dir = (label === 'A' ? args.a : args.b) ?? 'dist';
      const nodeArgs = (label === 'A' ? args['a-node-args'] : args['b-node-args']) ?? '';
      const settings = (label === 'A' ? args['a-env'] : args['b-env']) ?? '';
      process.env.BENCH_PLATFORM_NODE_ARGS = `${shared} ${nodeArgs}`.trim();
      const platform = await startPlatform(mode, parseEnvPairs(settings), `${label} (${dir})`, `${dir}/services/platform/main.js`);
      started.push({ label, dir, nodeArgs, env: settings, platform });
      await platform.addProviders(upstream, delays);
    }
  } finally {
    process.env.BENCH_PLATFORM_NODE_ARGS = shared;
  }
}
