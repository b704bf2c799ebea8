import test from 'ava';
import type { ChatCompletion, LlmPort } from '../../services/response-api/responses/ports.js';
import { createResponse } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import type { ResponseStore } from '../../services/response-api/responses/store.js';
import { responsesDomainDeps, type ResponsesPlatform, domainSuite, principalOf } from '../responses/harness.js';

// A streamed or background response is written while it runs (when tool calls start, after each
// step) only so that GET shows its progress. The database failing one of those writes (a blip, a
// failover) must not fail the whole response: its final write decides how it is stored.
let p: ResponsesPlatform;
let store: ResponseStore;

domainSuite(test, (platform, responses) => {
  p = platform;
  store = responses;
});

let users = 0;
const newUserId = () => `user_progress_${process.pid}_${++users}`;
const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
const fn = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false };

/** A store whose writes of a running response (`in_progress`) fail, as in a database blip; the final write goes through. */
function flakyStore() {
  const failed: string[] = [];
  const flaky: ResponseStore = {
    ...store,
    async save(id, patch) {
      if (patch.status === 'in_progress') {
        failed.push(patch.status);
        throw new Error('Connection terminated unexpectedly');
      }
      return store.save(id, patch);
    },
  };
  return { flaky, failed };
}

test('a progress write the database fails does not fail the response: the loop goes on and its end is stored', async (t) => {
  const { flaky, failed } = flakyStore();
  let steps = 0;
  const llm: LlmPort = {
    async complete(): Promise<ChatCompletion> {
      steps++;
      return { choices: [{ message: { content: null, tool_calls: [{ id: 'call_w', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] }, finish_reason: 'tool_calls' }], usage };
    },
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  const userId = newUserId();
  const events: string[] = [];
  const deps = responsesDomainDeps(p, flaky, llm);
  const body = { model: 'm', input: 'weather?', tools: [fn] } as CreateResponseRequest;
  const answered = await createResponse(deps, principalOf(userId), body, { signal: new AbortController().signal, onEvent: (event) => void events.push(event.type) });
  t.true(failed.length > 0, 'a progress write failed');
  t.is(steps, 1);
  t.is(answered.status, 'completed');
  t.is(answered.error, null);
  t.like(answered.output.at(-1), { type: 'function_call', name: 'get_weather', arguments: '{"city":"Oslo"}' });
  t.is(events.at(-1), 'response.completed');
  const row = (await store.find(userId, answered.id))!;
  t.is(row.status, 'completed', 'the final write stored the end');
  t.like(row.body.output.at(-1), { type: 'function_call', call_id: 'call_w' });
});

test('a background response whose first write of in_progress fails still runs and ends completed', async (t) => {
  const { flaky, failed } = flakyStore();
  const llm: LlmPort = {
    complete: async () => ({ choices: [{ message: { content: 'sunny' }, finish_reason: 'stop' }], usage }),
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  const userId = newUserId();
  const deps = responsesDomainDeps(p, flaky, llm);
  const queued = await createResponse(deps, principalOf(userId), { model: 'm', input: 'weather?', tools: [], background: true } as CreateResponseRequest, { signal: new AbortController().signal });
  t.is(queued.status, 'queued');
  await deps.running.get(queued.id)?.done;
  t.true(failed.length > 0, 'the write of in_progress failed');
  const row = (await store.find(userId, queued.id))!;
  t.is(row.status, 'completed');
  t.is(row.body.output[0].content[0].text, 'sunny');
});
