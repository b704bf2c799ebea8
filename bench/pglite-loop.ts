/**
 * `node --import tsx bench/pglite-loop.ts`: what embedded-database work costs the requests in
 * flight. The same database work (usage batches of 200 rows, a catalog version check, an identity
 * lookup, in a loop) runs against PGlite on the main thread (as knex-pglite does by default) and
 * against PGlite in a worker thread (the kit's `createDatabase`), alternating in slices, while the
 * main thread's event-loop delay is sampled. Prints p50/p99/max delay and the database work done.
 *   --seconds S   per slice (default 3), --rounds N (default 3)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { PGlite } from '@electric-sql/pglite';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import { createDatabase } from '../services/kit/db/database.js';
import { median } from './lib/load.js';
import { fmt, renderTable, type Row } from './lib/report.js';

const { values: args } = parseArgs({ options: { seconds: { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' } } });
const seconds = Number(args.seconds);
const rounds = Number(args.rounds);

async function prepare(knex: Knex) {
  await knex.raw('create table usage_events (id serial primary key, user_id text not null, model text not null, tokens int not null, at timestamptz not null default now())');
  await knex.raw('create index on usage_events (user_id, at)');
  await knex.raw('create table users (id text primary key, is_admin boolean not null default false, disabled boolean not null default false)');
  await knex.raw('create table catalog_version (id int primary key, version int not null)');
  await knex('catalog_version').insert({ id: 1, version: 1 });
  await knex('users').insert(Array.from({ length: 1000 }, (_, i) => ({ id: `user_${i}` })));
}

/**
 * Background database work for `ms`, at a poller's cadence (one round every 10 ms, as usage flushes,
 * catalog polls and identity lookups come and go): returns how many rounds ran.
 */
async function work(knex: Knex, ms: number): Promise<number> {
  const until = Date.now() + ms;
  let n = 0;
  while (Date.now() < until) {
    await sleep(10);
    await knex('usage_events').insert(Array.from({ length: 200 }, (_, i) => ({ user_id: `user_${(n * 7 + i) % 1000}`, model: 'bench-model', tokens: 14 })));
    await knex('catalog_version').where({ id: 1 }).first();
    await knex('users').where({ id: `user_${n % 1000}` }).first();
    await knex('usage_events').where({ user_id: `user_${n % 1000}` }).sum({ t: 'tokens' });
    n++;
  }
  return n;
}

const mainThread = knexFactory({ client: ClientPgLite as unknown as typeof knexFactory.Client, connection: { pglite: new PGlite() } as unknown as Knex.StaticConnectionConfig });
const worker = await createDatabase({ dataDir: '.', inMemory: true });
await prepare(mainThread);
await prepare(worker.knex);
const variants: Array<[string, Knex]> = [
  ['PGlite on the main thread', mainThread],
  ['PGlite in a worker thread', worker.knex],
];
const results = new Map(variants.map(([name]) => [name, { p50: [] as number[], p99: [] as number[], max: [] as number[], iterations: [] as number[] }]));
/** How late a 1 ms interval fires while `run` runs: what a request arriving then waits, in ms. */
async function sampleLateness<T>(run: () => Promise<T>): Promise<{ result: T; lateness: number[] }> {
  const lateness: number[] = [];
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    lateness.push(Math.max(0, now - last - 1));
    last = now;
  }, 1);
  const result = await run();
  clearInterval(timer);
  return { result, lateness: lateness.sort((a, b) => a - b) };
}
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
for (let r = 0; r < rounds; r++) {
  for (const [name, knex] of r % 2 ? [...variants].reverse() : variants) {
    const { result: iterations, lateness } = await sampleLateness(() => work(knex, seconds * 1000));
    const res = results.get(name)!;
    res.p50.push(pct(lateness, 50));
    res.p99.push(pct(lateness, 99));
    res.max.push(lateness.at(-1)!);
    res.iterations.push(iterations / seconds);
  }
}
const rows: Row[] = [...results].map(([name, r]) => ({
  metric: name,
  cells: { 'loop delay p50 ms': fmt(median(r.p50)), 'p99 ms': fmt(median(r.p99)), 'max ms': fmt(median(r.max)), 'work rounds/s': fmt(median(r.iterations), 0) },
}));
console.log(`# event-loop delay of the main thread while PGlite works (medians of ${rounds} slices of ${seconds} s each, alternating)`);
console.log(renderTable(['loop delay p50 ms', 'p99 ms', 'max ms', 'work rounds/s'], rows));
await mainThread.destroy();
await worker.close();
