import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import { longestLoopMs } from '../../services/response-api/responses/loop.js';
import type { ChatCompletion, LlmPort } from '../../services/response-api/responses/ports.js';
import { INTERRUPTED_ERROR } from '../../services/response-api/responses/purge.js';
import { cancelResponse, createResponse, getResponse } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import type { ResponseStore } from '../../services/response-api/responses/store.js';
import { responsesDomainDeps, type ResponsesPlatform, domainSuite, principalOf } from '../responses/harness.js';

// A response left queued or running by a process that stopped (a crash) is ended by the sweep, which
// runs once per RESPONSES_PURGE_INTERVAL_MS (an hour by default, never when 0). A read that finds one
// older than any loop runs ends it at once, as the sweep would: retrieve, cancel and chaining then
// agree with what a stream of it ends with, instead of `in_progress` until the next pass.
let p: ResponsesPlatform;
let store: ResponseStore;

domainSuite(test, (platform, responses) => {
  p = platform;
  store = responses;
});

let users = 0;
const newUserId = () => `user_stale_${process.pid}_${++users}`;
const answer = (content: string): ChatCompletion => ({ choices: [{ message: { content }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
const llm: LlmPort = {
  complete: async () => answer('continued'),
  appendConversationItems: async () => {},
  conversationHistory: async function* () {},
  contextLength: async () => null,
};

function setup() {
  const clock = new ManualClock(Date.now());
  const deps = responsesDomainDeps(p, store, llm, { clock });
  const insert = (userId: string, id: string, createdAt: number) =>
    store.insert({
      id,
      user_id: userId,
      status: 'in_progress',
      background: true,
      cancel_requested: false,
      body: { id, object: 'response', status: 'in_progress', output: [], error: null },
      context: [{ role: 'user', content: 'hello' }],
      input_items: [],
      created_at: new Date(createdAt),
      expires_at: new Date(createdAt + 30 * 86_400_000),
    });
  return { clock, deps, insert, staleAt: clock.now() - longestLoopMs(deps) - 60_000 };
}

test('retrieving a running response older than any loop runs answers it failed with the interrupted error, and stores that', async (t) => {
  const { deps, insert, clock, staleAt } = setup();
  const userId = newUserId();
  const stale = `resp_stale_get_${process.pid}`;
  const fresh = `resp_fresh_get_${process.pid}`;
  await insert(userId, stale, staleAt);
  await insert(userId, fresh, clock.now());

  const answered = await getResponse(deps, principalOf(userId), stale);
  t.is(answered.status, 'failed');
  t.deepEqual(answered.error, INTERRUPTED_ERROR);
  const row = (await store.find(userId, stale))!;
  t.is(row.status, 'failed', 'stored, as the sweep stores it');
  t.deepEqual(row.body.error, INTERRUPTED_ERROR);

  // One its loop may still be running is answered as it is.
  t.is((await getResponse(deps, principalOf(userId), fresh)).status, 'in_progress');
  t.is((await store.find(userId, fresh))!.status, 'in_progress');
  // Another user's read of the stale one is a 404 and ends nothing of theirs.
  const other = newUserId();
  const otherStale = `resp_stale_other_${process.pid}`;
  await insert(other, otherStale, staleAt);
  await t.throwsAsync(getResponse(deps, principalOf(userId), otherStale), { message: /not found/ });
  t.is((await store.find(other, otherStale))!.status, 'in_progress');
});

test('a cancel of a running response older than any loop runs answers it failed at once (it had ended; no wait for a loop)', async (t) => {
  const { deps, insert, staleAt } = setup();
  const userId = newUserId();
  const id = `resp_stale_cancel_${process.pid}`;
  await insert(userId, id, staleAt);
  const answered = await cancelResponse(deps, principalOf(userId), id, 0);
  t.is(answered.status, 'failed');
  t.deepEqual(answered.error, INTERRUPTED_ERROR);
  t.is((await store.find(userId, id))!.status, 'failed');
});

test('chaining from a running response older than any loop runs continues from it, rather than a 400 saying it has not finished', async (t) => {
  const { deps, insert, staleAt } = setup();
  const userId = newUserId();
  const id = `resp_stale_chain_${process.pid}`;
  await insert(userId, id, staleAt);
  const next = await createResponse(deps, principalOf(userId), { model: 'm', input: 'go on', tools: [], previous_response_id: id } as CreateResponseRequest, { signal: new AbortController().signal });
  t.is(next.status, 'completed');
  t.is(next.output_text ?? next.output[0]?.content?.[0]?.text, 'continued');
  t.is((await store.find(userId, id))!.status, 'failed');
});
