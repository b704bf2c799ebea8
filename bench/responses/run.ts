/**
 * Responses benchmark (`node --import tsx bench/responses/run.ts`): what the tool loop itself costs
 * per step, over the upstream and tool time, with a zero-delay fake upstream. Prints figures, not
 * pass/fail:
 *   1. the engine alone: runLoop with in-memory ports answering at once (a 3-step loop: two tool
 *      steps and an answer), per step p50/p99: bookkeeping, events, message building;
 *   2. the service: a second response-api instance over the same platform whose llm-api and
 *      mcp-tools clients are timed. Requests run one at a time, so each request's time inside those
 *      clients (its upstream and tool time: chat completions, MCP session, tools/list, tools/call)
 *      is known and subtracted: what is left is response-api's own cost (routing, validation,
 *      storage of the response and its progress, events, JSON), divided by the steps, p50/p99:
 *      a. one step (tools: []);
 *      b. one step with the platform tools offered (the default) and none called: what reading
 *         the tool list costs a response (its client time counts as tool time, so compare totals);
 *      c. a 3-step loop whose tool calls name a tool that does not exist (the tool list is read,
 *         no tool runs);
 *      d. a 3-step loop with two python_exec steps (the sandbox run counts as tool time).
 *   3. time to the first text: a streamed one-step response over a provider that writes its answer
 *      over time (20 words, 25 ms apart), when its first `response.output_text.delta` arrives and
 *      when it ends, with `tools: []` and with the platform tools offered, beside a chat
 *      completion streamed from llm-api directly; and the same 20 words from a zero-delay
 *      provider, where the whole time is what streaming a step costs.
 *   For scale, the chat completion asked from llm-api directly is printed too.
 * Env: BENCH_REQUESTS (default 300), BENCH_ENGINE (5000), BENCH_TOOLS_CACHE_MS (30000: the tool
 * list's reuse, RESPONSES_TOOLS_CACHE_MS; 0 reads it for every response). Needs the test databases (PostgreSQL).
 */
import { Agent, request } from 'undici';
import { createServiceApp, serviceAppOptions, startService, systemClock, type ServiceDefinition } from '../../services/kit/index.js';
import { buildResponsesDeps } from '../../services/response-api/deps.js';
import { responseApiService } from '../../services/response-api/service.js';
import { runLoop, type LoopPlan } from '../../services/response-api/responses/loop.js';
import { ResponseRecorder } from '../../services/response-api/responses/recorder.js';
import { createLlmPort, createToolsPort, type LlmPort, type ToolSession, type ToolsPort } from '../../services/response-api/responses/ports.js';
import { responsesRoutes } from '../../services/response-api/responses/routes.js';
import { startResponsesPlatform } from '../../test/responses/harness.js';
import { edgeHeaders } from '../../test/helpers/users.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 300);
const ENGINE = Number(process.env.BENCH_ENGINE ?? 5000);
/** The timed response-api's RESPONSES_TOOLS_CACHE_MS (0: the tool list read for every response). */
const TOOLS_CACHE_MS = Number(process.env.BENCH_TOOLS_CACHE_MS ?? 30_000);
const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const fmt = (values: number[]) => `p50 ${pct(values, 50).toFixed(3)} ms  p99 ${pct(values, 99).toFixed(3)} ms`;
const now = () => Number(process.hrtime.bigint()) / 1e6;

async function engine(): Promise<number[]> {
  const principal = { userId: 'user_bench', subject: 'user_bench', email: null, username: null, authMethod: 'apikey' as const, isAdmin: false, isGuest: false };
  const llm: LlmPort = {
    async complete(_p, body) {
      const turns = (body.messages as any[]).filter((m) => m.role === 'assistant').length;
      const message = turns < 2 ? { content: null, tool_calls: [{ id: `call_${turns}`, function: { name: 'echo', arguments: '{"x":1}' } }] } : { content: 'done '.repeat(40) };
      return { choices: [{ message, finish_reason: turns < 2 ? 'tool_calls' : 'stop' }], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } };
    },
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  const session: ToolSession = { list: async () => [], call: async () => ({ output: 'ok', isError: false }), close: async () => {} };
  const plan: LoopPlan = {
    principal,
    model: 'm',
    instructions: null,
    messages: [{ role: 'user', content: 'hello' }],
    session,
    mcpTools: [{ type: 'function', function: { name: 'echo', parameters: { type: 'object' } } }],
    functionTools: [],
    toolChoice: 'auto',
    parallelToolCalls: true,
    maxToolCalls: null,
    maxSteps: 8,
    answerOnLastStep: false,
    maxOutputTokens: null,
    sampling: {},
  };
  const perStep: number[] = [];
  for (let i = 0; i < ENGINE + 200; i++) {
    const events: unknown[] = [];
    const recorder = new ResponseRecorder({ id: 'resp_x', status: 'in_progress', output: [] }, (e) => void events.push(JSON.stringify(e)));
    const t0 = now();
    recorder.start();
    await runLoop({ llm, toolTimeoutMs: 1000, stepTimeoutMs: 1000 }, plan, recorder, new AbortController().signal, () => false);
    recorder.finish();
    if (i >= 200) perStep.push((now() - t0) / 3);
  }
  return perStep;
}

/**
 * A streamed request, one at a time: when the first bytes matching `marker` arrived (the first text
 * of the answer) and when the stream ended.
 */
async function firstText(url: string, headers: Record<string, string>, body: unknown, marker: RegExp, n: number): Promise<{ first: number[]; whole: number[] }> {
  const agent = new Agent({ connections: 1 });
  const first: number[] = [];
  const whole: number[] = [];
  for (let i = 0; i < n + 5; i++) {
    const t0 = now();
    const res = await request(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body), dispatcher: agent });
    if (res.statusCode !== 200) throw new Error(`${res.statusCode} from ${url}: ${(await res.body.text()).slice(0, 300)}`);
    let seen = -1;
    for await (const bytes of res.body) if (seen < 0 && marker.test(bytes.toString())) seen = now() - t0;
    if (i < 5) continue;
    if (seen < 0) throw new Error(`no ${marker} in the stream of ${url}`);
    first.push(seen);
    whole.push(now() - t0);
  }
  await agent.close();
  return { first, whole };
}

async function timed(url: string, headers: Record<string, string>, body: unknown, n: number, divide = 1, inner?: { reset(): void; ms(): number }): Promise<{ total: number[]; own: number[] }> {
  const agent = new Agent({ connections: 1 });
  const total: number[] = [];
  const own: number[] = [];
  for (let i = 0; i < n + 20; i++) {
    inner?.reset();
    const t0 = now();
    const res = await request(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body), dispatcher: agent });
    const text = await res.body.text();
    const elapsed = now() - t0;
    if (res.statusCode !== 200) throw new Error(`${res.statusCode} from ${url}: ${text.slice(0, 300)}`);
    if (i < 20) continue;
    total.push(elapsed / divide);
    if (inner) own.push((elapsed - inner.ms()) / divide);
  }
  await agent.close();
  return { total, own };
}

/** Time spent inside the wrapped clients since the last reset (requests run one at a time). */
function stopwatch() {
  let spent = 0;
  const time = async <T>(work: () => Promise<T>): Promise<T> => {
    const t0 = now();
    try {
      return await work();
    } finally {
      spent += now() - t0;
    }
  };
  return { time, reset: () => void (spent = 0), ms: () => spent };
}

function timedLlm(llm: LlmPort, watch: ReturnType<typeof stopwatch>): LlmPort {
  return {
    complete: (principal, body, signal, onText) => watch.time(() => llm.complete(principal, body, signal, onText)),
    appendConversationItems: (principal, id, items) => watch.time(() => llm.appendConversationItems(principal, id, items)),
    // Pages are read as the history is iterated; the bench's responses name no conversation.
    conversationHistory: (principal, id) => llm.conversationHistory(principal, id),
    contextLength: (principal, model, signal) => watch.time(() => llm.contextLength(principal, model, signal)),
  };
}

function timedTools(tools: ToolsPort, watch: ReturnType<typeof stopwatch>): ToolsPort {
  return {
    async open(principal, signal) {
      const session = await watch.time(() => tools.open(principal, signal));
      return {
        list: () => watch.time(() => session.list()),
        call: (name, args, options) => watch.time(() => session.call(name, args, options)),
        close: () => watch.time(() => session.close()),
      };
    },
  };
}

const engineSteps = await engine();
console.log(`1. engine alone, per step (3-step loops, zero-delay ports, ${ENGINE} loops): ${fmt(engineSteps)}`);

const p = await startResponsesPlatform();
const watch = stopwatch();
// A second response-api over the same platform, its clients of llm-api and mcp-tools timed.
const timedService: ServiceDefinition = {
  ...responseApiService,
  name: 'response-api-timed',
  port: () => 0,
  createApp(ctx) {
    const llm = createLlmPort({ baseUrl: () => ctx.urls.llmApi, gatewayToken: ctx.gatewaySecret, timeoutMs: 60_000, clock: systemClock, modelCacheMs: 30_000 });
    const tools = createToolsPort({ baseUrl: () => ctx.urls.mcpTools, gatewayToken: ctx.gatewaySecret, clock: systemClock, listCacheMs: TOOLS_CACHE_MS });
    const deps = buildResponsesDeps(ctx, { llm: timedLlm(llm, watch), tools: timedTools(tools, watch) });
    ctx.onStop(() => llm.close());
    return createServiceApp({ ...serviceAppOptions(ctx, 'response-api'), routeTable: responsesRoutes(() => deps.responses) });
  },
};
const timedApi = await startService(timedService, { runtime: p.runtime, gatewaySecret: p.gatewaySecret, urls: p.ctx.urls });
try {
  const { user } = await p.newUser();
  const headers = edgeHeaders(p.gatewaySecret, user as any, 'apikey');
  const url = `http://127.0.0.1:${timedApi.server.port}/v1/responses`;
  p.fake.script('bench-one', [{ content: 'ok' }]);
  p.fake.script('bench-three', [{ tool_calls: [{ name: 'not_a_tool', arguments: {} }] }, { tool_calls: [{ name: 'not_a_tool', arguments: {} }] }, { content: 'ok' }]);
  p.fake.script('bench-python', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }] }, { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(2)' } }] }, { content: 'ok' }]);
  const chat = await timed(`${p.serviceUrl('llm-api')}/v1/chat/completions`, headers, { model: 'fake-model', messages: [{ role: 'user', content: 'x #script:bench-one' }] }, REQUESTS);
  const one = await timed(url, headers, { model: 'fake-model', input: 'x #script:bench-one', tools: [] }, REQUESTS, 1, watch);
  const offered = await timed(url, headers, { model: 'fake-model', input: 'x #script:bench-one' }, REQUESTS, 1, watch);
  const three = await timed(url, headers, { model: 'fake-model', input: 'x #script:bench-three' }, Math.ceil(REQUESTS / 3), 3, watch);
  const python = await timed(url, headers, { model: 'fake-model', input: 'x #script:bench-python' }, Math.ceil(REQUESTS / 10), 3, watch);
  console.log(`   (for scale) llm-api chat completion asked directly:      ${fmt(chat.total)}`);
  console.log(`2a. one step (tools: []), whole request:                    ${fmt(one.total)}`);
  console.log(`    response-api's own cost per step (minus upstream):      ${fmt(one.own)}`);
  console.log(`2b. one step, the platform tools offered, none called, whole: ${fmt(offered.total)}`);
  console.log(`    response-api's own cost (minus upstream+tools):         ${fmt(offered.own)}`);
  console.log(`2c. 3-step loop, tool list read, no tool run, per step:     ${fmt(three.total)}`);
  console.log(`    response-api's own cost per step (minus upstream+tools): ${fmt(three.own)}`);
  console.log(`2d. 3-step loop with two python_exec runs, per step:        ${fmt(python.total)}`);
  console.log(`    response-api's own cost per step (minus upstream+tools): ${fmt(python.own)}`);
  // A provider that writes its answer over time: 20 words, 25 ms apart (~0.5 s per answer).
  const slow = { model: 'fake-model', stream: true };
  const paced = 'tell me #slow:25 #words:20';
  const chatFirst = await firstText(`${p.serviceUrl('llm-api')}/v1/chat/completions`, headers, { ...slow, messages: [{ role: 'user', content: paced }] }, /"content":"[^"]/, Math.ceil(REQUESTS / 10));
  const streamed = await firstText(url, headers, { ...slow, input: paced, tools: [] }, /response\.output_text\.delta/, Math.ceil(REQUESTS / 10));
  const streamedOffered = await firstText(url, headers, { ...slow, input: `${paced} #notools` }, /response\.output_text\.delta/, Math.ceil(REQUESTS / 10));
  console.log(`3. a streamed answer from a provider writing 20 words 25 ms apart, one step:`);
  console.log(`   (for scale) chat completion streamed from llm-api, first text: ${fmt(chatFirst.first)}   whole: ${fmt(chatFirst.whole)}`);
  console.log(`   streamed response (tools: []), first output_text.delta:      ${fmt(streamed.first)}   whole: ${fmt(streamed.whole)}`);
  console.log(`   the same with the platform tools offered (none called):       ${fmt(streamedOffered.first)}   whole: ${fmt(streamedOffered.whole)}`);
  // The price of streaming a step: the same 20 words from a provider that answers at once.
  const instant = await firstText(url, headers, { ...slow, input: 'tell me #words:20', tools: [] }, /response\.output_text\.delta/, REQUESTS);
  console.log(`   the same from a zero-delay provider (what streaming a step costs), whole: ${fmt(instant.whole)}`);
} finally {
  await timedApi.server.close(5_000);
  await timedApi.stop();
  await p.stop();
}
