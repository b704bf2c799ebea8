/**
 * `node --import tsx bench/history.ts`: what a chat turn costs the platform as its conversation
 * grows. A turn that names a stored conversation (`conversation: <id>`) is sent the conversation's
 * history, trimmed oldest-first to what the model's context holds; this measures that turn
 * against conversations of several sizes, with the model's context fixed, so a conversation
 * longer than the context shows what the platform does with the part it drops.
 *
 * The platform as `npm start` runs it (or `--mode production`), the fake provider (0 ms) as its one
 * provider, the model's context length set by the administrator. Each conversation is filled
 * through the items API (user and assistant messages of `--item-bytes` each), then turns are sent
 * one at a time on one connection, once the platform is idle again after the fill, with
 * `conversation` and without `store` (the conversation lends its history and is not written, so its
 * size holds), or with `--store` as a chat client that keeps its conversations sends them (each turn
 * stores its message and the answer: two items, two `message.sent` events, which the pipeline
 * carries while the turns go on). Sizes alternate by round so drift hits all.
 * Prints per size: the turn's latency p50 / p99, the process's CPU per turn (main thread, and all
 * threads, and the busiest thread other than the main one: in the embedded platform its database's worker).
 *   --sizes a,b,… (items per conversation, default 20,200,2000,6000)   --item-bytes N (1024)
 *   --context N (the model's context length in tokens, default 32768: ~128 KiB of text)
 *   --turns N (per size and round, default 60)   --rounds N (3)   --mode embedded|production
 *   --dist DIR (the build to run, default dist: another build's, to compare)   --env "KEY=value,…" (the platform's settings)
 *   --store (turns with `store: true`)
 *   --api chat|responses (default chat: `POST /v1/chat/completions`; responses: `POST /v1/responses`
 *     with `conversation`, no tools, and `store: false` unless --store)   --truncation auto|disabled
 *     (the Responses request's `truncation`, default auto; chat always fits the history)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { median, percentile } from './lib/load.js';
import { busiestOtherThreadMs, parseEnvPairs, processCpuMs, startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    sizes: { type: 'string', default: '20,200,2000,6000' },
    'item-bytes': { type: 'string', default: '1024' },
    context: { type: 'string', default: '32768' },
    turns: { type: 'string', default: '60' },
    rounds: { type: 'string', default: '3' },
    mode: { type: 'string', default: 'embedded' },
    dist: { type: 'string', default: 'dist' },
    env: { type: 'string', default: '' },
    store: { type: 'boolean', default: false },
    api: { type: 'string', default: 'chat' },
    truncation: { type: 'string', default: 'auto' },
  },
});
const SIZES = args.sizes.split(',').map(Number);
const ITEM_BYTES = Number(args['item-bytes']);
const CONTEXT = Number(args.context);
const TURNS = Number(args.turns);
const ROUNDS = Number(args.rounds);
const MODE = args.mode as PlatformMode;
for (const size of SIZES) if (!Number.isInteger(size) || size < 1) throw new Error('--sizes takes whole numbers above 0');
if (MODE !== 'embedded' && MODE !== 'production') throw new Error('--mode is embedded or production');
if (args.api !== 'chat' && args.api !== 'responses') throw new Error('--api is chat or responses');
if (args.truncation !== 'auto' && args.truncation !== 'disabled') throw new Error('--truncation is auto or disabled');

const upstream = await startUpstream();
const platform = await startPlatform(MODE, parseEnvPairs(args.env), MODE, `${args.dist}/services/platform/main.js`);
const agent = new Agent({ connections: 1, pipelining: 1 });
const admin = { 'x-api-key': platform.adminKey, 'content-type': 'application/json' };

async function call<T>(method: 'GET' | 'POST' | 'PATCH', path: string, body?: unknown): Promise<T> {
  const res = await request(`${platform.edgeUrl}${path}`, { method, headers: admin, body: body === undefined ? undefined : JSON.stringify(body), dispatcher: agent });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${text.slice(0, 300)}`);
  return JSON.parse(text) as T;
}

const TURN_TEXT = 'A stored turn of a long conversation, kept by the platform and replayed as history; ';
const itemText = (i: number) => `${TURN_TEXT.repeat(Math.ceil(ITEM_BYTES / TURN_TEXT.length)).slice(0, ITEM_BYTES - 16)} (item ${i})`;

try {
  await platform.addProviders(upstream, [0]);
  const models = await call<{ data: Array<{ id: string; provider_id?: string }> }>('GET', '/v1/admin/models/provider-models?limit=100');
  for (const pm of models.data) await call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { context_length: CONTEXT } });

  const conversations = new Map<number, string>();
  for (const size of SIZES) {
    const { id } = await call<{ id: string }>('POST', '/v1/conversations', {});
    for (let written = 0; written < size; written += 20) {
      const items = Array.from({ length: Math.min(20, size - written) }, (_, k) => {
        const i = written + k;
        return { type: 'message', role: i % 2 ? 'assistant' : 'user', content: itemText(i) };
      });
      await call('POST', `/v1/conversations/${id}/items`, { items });
    }
    conversations.set(size, id);
  }

  // Each stored user or assistant message is an event (`message.sent`) the platform's pipeline
  // carries to webhooks after the fill; turns are measured once it is done (CPU ≤ 10 % of a core for 2 s).
  const cpuOfServing = () => Promise.all(platform.serving.map((pid) => processCpuMs(pid)));
  const cpuNow = async () => (await cpuOfServing()).reduce((sum, cpu) => sum + cpu.all, 0);
  for (let quiet = 0, last = await cpuNow(), deadline = Date.now() + 600_000; quiet < 4; ) {
    await sleep(500);
    const now = await cpuNow();
    quiet = now - last <= 50 ? quiet + 1 : 0;
    last = now;
    if (Date.now() > deadline) throw new Error('the platform did not settle within 10 minutes of the fill');
  }

  const QUESTION = 'And what comes next?';
  const turn = async (id: string) => {
    const started = performance.now();
    if (args.api === 'responses') {
      await call('POST', '/v1/responses', { model: 'bench-d0', conversation: id, input: QUESTION, truncation: args.truncation, tools: [], store: args.store });
    } else {
      await call('POST', '/v1/chat/completions', { model: 'bench-d0', conversation: id, ...(args.store ? { store: true } : {}), messages: [{ role: 'user', content: QUESTION }] });
    }
    return performance.now() - started;
  };
  const figures = new Map<number, { p50: number[]; p99: number[]; mainMs: number[]; allMs: number[]; otherMs: number[] }>();
  for (const id of conversations.values()) for (let i = 0; i < 10; i++) await turn(id); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? SIZES : [...SIZES].reverse();
    for (const size of order) {
      const id = conversations.get(size)!;
      const before = await cpuOfServing();
      const ms: number[] = [];
      for (let i = 0; i < TURNS; i++) ms.push(await turn(id));
      const after = await cpuOfServing();
      const spent = (read: (cpu: { main: number; all: number }) => number) => after.reduce((sum, cpu, i) => sum + read(cpu) - read(before[i]!), 0) / TURNS;
      ms.sort((a, b) => a - b);
      const f = figures.get(size) ?? { p50: [], p99: [], mainMs: [], allMs: [], otherMs: [] };
      f.p50.push(percentile(ms, 50));
      f.p99.push(percentile(ms, 99));
      f.mainMs.push(spent((cpu) => cpu.main));
      f.allMs.push(spent((cpu) => cpu.all));
      f.otherMs.push(platform.serving.reduce((sum, pid, i) => sum + busiestOtherThreadMs(pid, before[i]!.threads, after[i]!.threads), 0) / TURNS);
      figures.set(size, f);
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }

  const api = args.api === 'responses' ? `, Responses API (truncation: ${args.truncation})` : '';
  console.log(`\n${MODE}${api}${args.store ? ', store: true' : ''}, context ${CONTEXT} tokens, items of ${ITEM_BYTES} bytes, ${TURNS} turns × ${ROUNDS} rounds (medians of rounds)`);
  console.log('| items in the conversation | turn p50 ms | turn p99 ms | main-thread CPU ms / turn | all threads CPU ms / turn | busiest other thread ms / turn |');
  console.log('|---|---|---|---|---|---|');
  for (const size of SIZES) {
    const f = figures.get(size)!;
    console.log(`| ${size} | ${median(f.p50).toFixed(2)} | ${median(f.p99).toFixed(2)} | ${median(f.mainMs).toFixed(2)} | ${median(f.allMs).toFixed(2)} | ${median(f.otherMs).toFixed(2)} |`);
  }
} finally {
  await agent.close();
  await platform.stop();
  await upstream.stop();
}
