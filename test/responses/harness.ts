import { readdir, readFile } from 'node:fs/promises';
import type { ExecutionContext, TestFn } from 'ava';
import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';
import type { ChatCompletion, LlmPort } from '../../services/response-api/responses/ports.js';
import type { ResponsesDeps } from '../../services/response-api/responses/responses.js';
import { createResponseStore, type ResponseStore } from '../../services/response-api/responses/store.js';
import type { Principal } from '../../services/kit/index.js';

/**
 * The whole platform behind the embedded edge with a scripted fake provider serving `fake-model`,
 * for the Responses tests: clients are the official `openai` SDK through the edge.
 */
export interface ResponsesPlatform extends McpPlatform {
  fake: FakeUpstream;
  /** A new ordinary user and an `openai` client acting as them through the edge. */
  newClient(): Promise<{ client: OpenAI; key: string; userId: string }>;
}

export const MODEL = 'fake-model';
/** A model whose catalog entry supports reasoning (what deep research needs). */
export const REASONING_MODEL = 'fake-reasoner';

export async function startResponsesPlatform(env: Record<string, string | undefined> = {}): Promise<ResponsesPlatform> {
  const fake = await startFakeUpstream({ name: 'scripted', models: [{ id: MODEL }, { id: REASONING_MODEL, supported_parameters: ['reasoning', 'tools'] }] });
  const p = await startMcpPlatform({ LLM_HEALTH_PROBE_INTERVAL_MS: '0', RESPONSES_CANCEL_POLL_MS: '50', ...env });
  const created = await p.api(p.adminKey, 'POST', '/v1/admin/providers', { name: 'Scripted', vendor: 'fake', base_url: fake.url });
  if (created.status !== 201) throw new Error(`provider: ${created.status} ${JSON.stringify(created.json)}`);
  const stop = p.stop.bind(p);
  return Object.assign(p, {
    fake,
    async newClient() {
      const { user, key } = await p.newUser();
      return { client: new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key, maxRetries: 0 }), key, userId: user.id };
    },
    async stop() {
      await stop();
      await fake.close();
    },
  });
}

/**
 * The Responses domain's dependencies for a test that calls `createResponse` or `cancelResponse`
 * directly: the platform's clock, logger and database (through `store`), no platform tools unless
 * `overrides` gives some, and ports that answer as the case needs.
 */
/** A caller of the Responses domain functions: the user `userId`, signed in with an API key. */
export const principalOf = (userId: string): Principal => ({ userId, subject: userId, email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false });

/**
 * The platform for a file of domain-level tests, and the response store over its database, handed
 * to `ready`: started before the file's tests, stopped after them. `env`: its settings over the
 * default, which turns the purge sweep off (RESPONSES_PURGE_INTERVAL_MS=0).
 */
export function domainSuite(test: TestFn, ready: (platform: ResponsesPlatform, store: ResponseStore) => void, env: Record<string, string | undefined> = {}): void {
  let platform: ResponsesPlatform | undefined;
  test.before(async () => {
    platform = await startResponsesPlatform({ RESPONSES_PURGE_INTERVAL_MS: '0', ...env });
    ready(platform, createResponseStore(platform.runtime.db.knex));
  });
  test.after.always(async () => {
    await platform?.stop();
  });
}

export function responsesDomainDeps(p: ResponsesPlatform, store: ResponseStore, llm: LlmPort, overrides: Partial<ResponsesDeps> = {}): ResponsesDeps {
  return {
    store,
    llm,
    tools: {
      open: async () => {
        throw new Error('this test offers no platform tools');
      },
    },
    media: { checkReferences: async () => {} },
    clock: p.runtime.clock,
    logger: p.runtime.logger,
    retentionDays: 30,
    cancelPollMs: 50,
    running: new Map(),
    toolTimeoutMs: 5000,
    stepTimeoutMs: 30_000,
    ...overrides,
  };
}

/** The text of the last tool message the model was sent. */
/** An llm-api port answering each step from `steps` (the last repeats); `asked` holds a copy of every step's body as sent. */
export function fakeLlm(steps: Array<(body: Record<string, any>, signal: AbortSignal) => ChatCompletion | Promise<ChatCompletion>>) {
  const asked: Array<Record<string, any>> = [];
  const llm: LlmPort = {
    async complete(_principal, body, signal) {
      asked.push(structuredClone(body));
      return steps[Math.min(asked.length - 1, steps.length - 1)]!(body, signal);
    },
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  return { llm, asked };
}

export const lastToolOutput = (messages: any[]) => String([...messages].reverse().find((m) => m.role === 'tool')?.content ?? '');

/** Creates a streamed response, records every event and checks the stream's rules; returns the events and the terminal response. */
export async function streamResponse(t: ExecutionContext, client: OpenAI, body: Omit<OpenAI.Responses.ResponseCreateParamsStreaming, 'stream'>) {
  const stream = await client.responses.create({ ...body, stream: true });
  const events: any[] = [];
  for await (const event of stream) events.push(event);
  return { events, final: checkStream(t, events) };
}

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);
/** The events of a content part's text or refusal, each inside its part. */
const TEXT_EVENTS = new Set(['response.output_text.delta', 'response.output_text.done', 'response.refusal.delta', 'response.refusal.done']);

/** The rules of the Responses event stream, checked on a whole recorded stream; returns the terminal event's response. */
export function checkStream(t: ExecutionContext, events: any[]) {
  t.is(events[0]?.type, 'response.created', 'response.created comes first');
  // A background response is created queued and says so (`response.queued`) before it runs.
  const queued = events[0]?.response?.status === 'queued';
  if (queued) t.like(events[1], { type: 'response.queued', response: { status: 'queued' } });
  const head = queued ? 3 : 2;
  t.is(events[head - 1]?.type, 'response.in_progress');
  const id = events[0].response.id;
  t.deepEqual(events[0].response.output, []);
  events.forEach((event, index) => {
    t.is(event.sequence_number, index, `sequence_number of event ${index} (${event.type})`);
    if (event.response) t.is(event.response.id, id, `${event.type} carries the same response id`);
  });
  const terminal = events.filter((e) => TERMINAL.has(e.type));
  t.is(terminal.length, 1, 'exactly one terminal event');
  t.is(events.at(-1), terminal[0], 'the terminal event is the last');

  // Every event about an item falls between that item's output_item.added and .done, and items are announced in order.
  const open = new Map<number, any>();
  const closed = new Set<number>();
  let nextIndex = 0;
  const openParts = new Set<string>();
  for (const event of events.slice(head, -1)) {
    if (event.type === 'response.output_item.added') {
      t.is(event.output_index, nextIndex++, 'output indices are announced in order');
      open.set(event.output_index, event.item);
      continue;
    }
    t.true(open.has(event.output_index), `${event.type} refers to an announced, unfinished item (${event.output_index})`);
    if (event.item_id) t.is(event.item_id, open.get(event.output_index).id, `${event.type} names its item`);
    const partKey = `${event.output_index}:${event.content_index}`;
    if (event.type === 'response.content_part.added') openParts.add(partKey);
    if (TEXT_EVENTS.has(event.type)) t.true(openParts.has(partKey), `${event.type} inside its content part`);
    if (event.type === 'response.content_part.done') openParts.delete(partKey);
    if (event.type === 'response.output_item.done') {
      t.is(event.item.id, open.get(event.output_index).id);
      if (event.item.type === 'message') t.false([...openParts].some((k) => k.startsWith(`${event.output_index}:`)), 'content parts close before their item');
      open.delete(event.output_index);
      closed.add(event.output_index);
    }
  }
  t.is(open.size, 0, 'every item is done before the terminal event');
  const final = terminal[0].response;
  t.is(final.output.length, closed.size);
  return final;
}

/** Host processes whose name (/proc/<pid>/comm) is `name`: sandboxed code renames its own process for a test to find it. */
export async function processesNamed(name: string): Promise<string[]> {
  const found: string[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
    if (comm.trim() === name) found.push(pid);
  }
  return found;
}
