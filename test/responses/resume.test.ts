import test from 'ava';
import { BadRequestError, NotFoundError } from 'openai';
import { ApiError, ManualClock } from '../../services/kit/index.js';
import { createResponseEventLog } from '../../services/response-api/responses/event-log.js';
import { longestLoopMs } from '../../services/response-api/responses/loop.js';
import type { LlmPort } from '../../services/response-api/responses/ports.js';
import { INTERRUPTED_ERROR, startRetentionPurge } from '../../services/response-api/responses/purge.js';
import type { StreamEvent } from '../../services/response-api/responses/recorder.js';
import { createResponse, responseEvents, type FollowOptions, type KeptEvent } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import { type ResponseEventRow, type ResponseStore } from '../../services/response-api/responses/store.js';
import { checkStream, MODEL, responsesDomainDeps, type ResponsesPlatform, domainSuite, principalOf } from './harness.js';

// Streaming a background response again: `GET /v1/responses/{id}?stream=true&starting_after=N`
// (the SDK's `responses.retrieve(id, {stream: true, starting_after})`) replays the kept events
// after N, then follows the running loop through the database until the terminal event. Through
// the edge with the official SDK, and the event log's batching and cleanup against the database.
let p: ResponsesPlatform;
let store: ResponseStore;

domainSuite(test, (platform, responses) => {
  p = platform;
  store = responses;
});

const keptEvents = (id: string) => p.runtime.db.knex('response_events').where({ response_id: id }).orderBy('sequence_number').select('sequence_number', 'type', 'data', 'created_at');
const collect = async (stream: AsyncIterable<any>) => {
  const events: any[] = [];
  for await (const event of stream) events.push(event);
  return events;
};
const gate = () => {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
};

test('a dropped background stream is re-attached from starting_after: exactly the later events, live to response.completed, then replayable', async (t) => {
  const step = gate();
  p.fake.script('resume', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6 * 7)' } }] }, { gate: step.promise, content: 'the answer is forty-two, said in a good many words' }]);
  const { client } = await p.newClient();
  const first = await client.responses.create({ model: MODEL, input: 'compute #script:resume', background: true, stream: true });
  const seen: any[] = [];
  for await (const event of first) {
    seen.push(event);
    // The tool answered and the next step waits for the gate: the client leaves here.
    if (event.type === 'response.mcp_call.completed') break;
  }
  const id = seen[0].response.id;
  const k = seen.at(-1).sequence_number;
  t.true(k >= 5, 'a few events were read before leaving');

  // Re-attached (the head arrives at once) while the loop still waits: the rest follows live.
  const resumed = await client.responses.retrieve(id, { stream: true, starting_after: k });
  step.open();
  const rest = await collect(resumed);
  t.deepEqual(
    rest.map((e) => e.sequence_number),
    rest.map((_, i) => k + 1 + i),
    'every event after k, none missing, none repeated',
  );
  t.is(rest.at(-1).type, 'response.completed');
  t.is(rest.at(-1).response.output.at(-1).content[0].text, 'the answer is forty-two, said in a good many words');
  t.true(rest.some((e) => e.type === 'response.output_text.delta'));

  // After the end: the whole stream is kept, as it was sent (the first read and the re-attached one).
  const all = await collect(await client.responses.retrieve(id, { stream: true }));
  checkStream(t, all);
  t.deepEqual(all, [...seen, ...rest]);
  t.deepEqual(all.slice(0, 3).map((e) => [e.type, e.response.status]), [['response.created', 'queued'], ['response.queued', 'queued'], ['response.in_progress', 'in_progress']]);

  // The rest after any k, and nothing after the terminal event.
  t.deepEqual(await collect(await client.responses.retrieve(id, { stream: true, starting_after: 3 })), all.slice(4));
  t.deepEqual(await collect(await client.responses.retrieve(id, { stream: true, starting_after: all.at(-1).sequence_number })), []);
  // The SDK's helper re-attaches through the same route (it filters at starting_after itself).
  const helper = client.responses.stream({ response_id: id, starting_after: 3 });
  const helperEvents: any[] = [];
  helper.on('event', (event) => helperEvents.push(event));
  const final = await helper.finalResponse();
  t.is(final.status, 'completed');
  t.deepEqual(helperEvents.map((e) => e.sequence_number), all.slice(4).map((e) => e.sequence_number));
  t.is(final.output_text, 'the answer is forty-two, said in a good many words');
  t.is(final.id, id);
});

test('a background response created without stream keeps its events too: streamed from the start while it runs', async (t) => {
  const step = gate();
  p.fake.script('resume-quiet', [{ gate: step.promise, content: 'done in the background' }]);
  const { client } = await p.newClient();
  const queued = await client.responses.create({ model: MODEL, input: 'go #script:resume-quiet', background: true, tools: [] });
  t.is(queued.status, 'queued');
  const stream = await client.responses.retrieve(queued.id, { stream: true });
  step.open();
  const events = await collect(stream);
  const final = checkStream(t, events);
  t.is(final.status, 'completed');
  t.deepEqual(final.output, (await client.responses.retrieve(queued.id)).output);
});

test('refusals: starting_after not a non-negative integer names it; a foreground response names stream; another user gets 404', async (t) => {
  p.fake.script('resume-refusals', [{ content: 'fine' }]);
  const { client } = await p.newClient();
  const background = await client.responses.create({ model: MODEL, input: 'x #script:resume-refusals', background: true, tools: [] });
  for (const bad of [-1, 1.5, 'abc']) {
    const error = await t.throwsAsync(client.responses.retrieve(background.id, { stream: true, starting_after: bad as number }), { instanceOf: BadRequestError });
    t.is((error as BadRequestError).param, 'starting_after', `starting_after=${bad}`);
  }

  // A foreground response, streamed or not, keeps no events.
  const streamed = await collect(await client.responses.create({ model: MODEL, input: 'y #script:resume-refusals', tools: [], stream: true }));
  const foregroundId = streamed[0].response.id;
  const refused = await t.throwsAsync(client.responses.retrieve(foregroundId, { stream: true }), { instanceOf: BadRequestError });
  t.is((refused as BadRequestError).param, 'stream');
  t.regex((refused as BadRequestError).message, /background/);
  t.deepEqual(await keptEvents(foregroundId), []);

  const other = await p.newClient();
  const hidden = await t.throwsAsync(other.client.responses.retrieve(background.id, { stream: true }), { instanceOf: NotFoundError });
  t.regex((hidden as NotFoundError).message, /not found/);
});

test('deleting a background response removes its kept events', async (t) => {
  p.fake.script('resume-delete', [{ content: 'to be deleted' }]);
  const { client } = await p.newClient();
  const queued = await client.responses.create({ model: MODEL, input: 'z #script:resume-delete', background: true, tools: [] });
  const events = await collect(await client.responses.retrieve(queued.id, { stream: true }));
  t.is(events.at(-1).type, 'response.completed');
  t.is((await keptEvents(queued.id)).length, events.length);
  await client.responses.delete(queued.id);
  t.deepEqual(await keptEvents(queued.id), []);
  await t.throwsAsync(client.responses.retrieve(queued.id, { stream: true }), { instanceOf: NotFoundError });
});

// --- The event log and the stream, against the database -------------------------------------

let users = 0;
const newUserId = () => `user_resume_${process.pid}_${++users}`;
const insertBackground = (userId: string, id: string, status = 'in_progress', createdAt = Date.now()) =>
  store.insert({
    id,
    user_id: userId,
    status,
    background: true,
    cancel_requested: false,
    body: { id, status, output: [] },
    context: [],
    input_items: [],
    created_at: new Date(createdAt),
    expires_at: new Date(createdAt + 30 * 86_400_000),
  });
const event = (type: string, sequence_number: number): StreamEvent => ({ type, sequence_number });

test('the event log writes in batches: deltas wait in memory, a terminal event writes them all in one statement', async (t) => {
  const userId = newUserId();
  const id = `resp_batch_${process.pid}`;
  await insertBackground(userId, id);
  const writes: number[] = [];
  const counting: ResponseStore = { ...store, appendEvents: (rows: ResponseEventRow[]) => (writes.push(rows.length), store.appendEvents(rows)) };
  // No timer tick during the test: only the terminal event writes.
  const log = createResponseEventLog({ store: counting, clock: new ManualClock(1_000_000), logger: p.runtime.logger, flushMs: 3_600_000 });
  const keep = log.recorder(id);
  keep(event('response.created', 0));
  for (let i = 1; i <= 40; i++) keep({ ...event('response.output_text.delta', i), delta: `piece ${i}` });
  keep(event('response.output_text.delta', 40)); // out of sequence: not kept
  t.is(log.pending(), 41);
  t.deepEqual(writes, []);
  t.deepEqual(await keptEvents(id), [], 'nothing written per delta');

  keep(event('response.completed', 41));
  await log.flush();
  t.deepEqual(writes, [42], 'one statement for the whole batch');
  const kept = await keptEvents(id);
  t.deepEqual(
    kept.map((e) => e.sequence_number),
    Array.from({ length: 42 }, (_, i) => i),
  );
  t.deepEqual(JSON.parse(kept[5]!.data), { type: 'response.output_text.delta', sequence_number: 5, delta: 'piece 5' });
  t.is(new Date(kept[0]!.created_at).getTime(), 1_000_000, 'stamped with the service clock');

  // A batch for a response deleted meanwhile is skipped, not an error that would hold the queue.
  const gone = log.recorder('resp_never_stored');
  gone(event('response.created', 0));
  gone(event('response.completed', 1));
  await log.flush();
  t.is(log.pending(), 0);
  t.deepEqual(await keptEvents('resp_never_stored'), []);
  await log.stop();
});

test('the stream follows events another process writes, ends at the terminal event, and stops when the client leaves', async (t) => {
  const userId = newUserId();
  const id = `resp_follow_${process.pid}`;
  await insertBackground(userId, id);
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 20 });
  const row = (sequence_number: number, type = 'response.output_text.delta'): ResponseEventRow => ({
    response_id: id,
    sequence_number,
    type,
    data: JSON.stringify(event(type, sequence_number)),
    created_at: new Date(),
  });
  await store.appendEvents([row(0, 'response.created'), row(1, 'response.in_progress'), row(2)]);
  const events = responseEvents(deps, principalOf(userId), id, 0, new AbortController().signal);
  t.deepEqual((await events.next()).value, [], 'accepted before any event');
  const seqs = (page: IteratorResult<KeptEvent[]>) => (page.value as KeptEvent[]).map((e) => e.sequence_number);
  t.deepEqual(seqs(await events.next()), [1, 2]);
  // Written by "another process" while the stream waits.
  const next = events.next();
  await store.appendEvents([row(3), row(4)]);
  t.deepEqual(seqs(await next), [3, 4]);
  const last = events.next();
  await store.appendEvents([row(5, 'response.completed')]);
  t.deepEqual(seqs(await last), [5]);
  t.true((await events.next()).done, 'nothing after the terminal event');

  // A client that leaves ends the stream of a response still running.
  const leaving = new AbortController();
  const id2 = `resp_leave_${process.pid}`;
  await insertBackground(userId, id2);
  const waiting = responseEvents(deps, principalOf(userId), id2, null, leaving.signal);
  t.deepEqual((await waiting.next()).value, []);
  const pending = waiting.next();
  leaving.abort();
  t.true((await pending).done);
});

// Serial (run before the others): its passes drop the ended events of every test's responses.
test.serial('cleanup: events of responses ended over the kept time are dropped whole; running ones and recent ones stay; purged responses take theirs', async (t) => {
  const userId = newUserId();
  const clock = new ManualClock(Date.now());
  const hour = 3_600_000;
  const at = (ms: number) => new Date(ms);
  const rows = (id: string, createdAt: Date, count: number, type = 'response.completed'): ResponseEventRow[] =>
    Array.from({ length: count }, (_, i) => ({ response_id: id, sequence_number: i, type: i === count - 1 ? type : 'response.output_text.delta', data: '{}', created_at: createdAt }));
  const ended = `resp_ended_${process.pid}`;
  const endedRecently = `resp_recent_${process.pid}`;
  const running = `resp_running_${process.pid}`;
  const expired = `resp_expired_${process.pid}`;
  await insertBackground(userId, ended, 'completed');
  await insertBackground(userId, endedRecently, 'completed');
  await insertBackground(userId, running, 'in_progress');
  await insertBackground(userId, expired, 'completed', clock.now() - 31 * 86_400_000);
  await store.appendEvents([
    ...rows(ended, at(clock.now() - 2 * hour), 3),
    // A long run: its first events are old, its end recent; none of them goes.
    ...rows(endedRecently, at(clock.now() - 2 * hour), 2, 'response.output_text.delta'),
    { response_id: endedRecently, sequence_number: 2, type: 'response.completed', data: '{}', created_at: at(clock.now() - 60_000) },
    ...rows(running, at(clock.now() - 2 * hour), 2, 'response.output_text.delta'),
    ...rows(expired, at(clock.now() - 2 * hour), 2),
  ]);
  const purge = startRetentionPurge({ store, clock, logger: p.runtime.logger, intervalMs: 0, eventsKeptMs: hour });
  await purge.run();
  t.deepEqual(await keptEvents(ended), []);
  t.is((await keptEvents(endedRecently)).length, 3);
  t.is((await keptEvents(running)).length, 2);
  t.deepEqual(await keptEvents(expired), [], 'a purged response takes its events');
  t.is(await store.find(userId, expired), undefined);

  // Once the long run's end is past the kept time too, its events go as well.
  clock.advance(hour);
  await purge.run();
  t.deepEqual(await keptEvents(endedRecently), []);
  t.is((await keptEvents(running)).length, 2);
  await purge.stop();
});

const keptRow = (id: string, sequence_number: number, type = 'response.output_text.delta'): ResponseEventRow => ({
  response_id: id,
  sequence_number,
  type,
  data: JSON.stringify(event(type, sequence_number)),
  created_at: new Date(),
});
const pages = async (stream: AsyncGenerator<KeptEvent[]>) => {
  const all: number[][] = [];
  for await (const page of stream) all.push(page.map((e) => e.sequence_number));
  return all;
};
// The ended-wait turned down to one poll, so no test waits the service's 5 s.
const quick: FollowOptions = { endedWaitMs: 1 };

test('the terminal event reaches the event log when the row ends, before the conversation append; the creator still gets it after', async (t) => {
  const userId = newUserId();
  const appendCalled = gate();
  const appendHeld = gate();
  const llm: LlmPort = {
    complete: async () => ({ choices: [{ message: { content: 'kept answer' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }),
    appendConversationItems: async () => {
      appendCalled.open();
      await appendHeld.promise;
    },
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  // No timer tick during the test: only the terminal event writes.
  const log = createResponseEventLog({ store, clock: p.runtime.clock, logger: p.runtime.logger, flushMs: 3_600_000 });
  const deps = responsesDomainDeps(p, store, llm, { events: log, cancelPollMs: 5 });
  const seen: StreamEvent[] = [];
  const request = { model: 'm', input: 'hello', tools: [], background: true, conversation: `conv_resume_${process.pid}` } as CreateResponseRequest;
  const done = createResponse(deps, principalOf(userId), request, { signal: new AbortController().signal, onEvent: (e) => void seen.push(e) });

  await appendCalled.promise;
  await log.flush();
  const id = seen[0]!.response.id as string;
  t.is((await store.find(userId, id))!.status, 'completed');
  t.is((await store.lastEvent(id))?.type, 'response.completed', 'kept while the append is still running');
  t.false(
    seen.some((e) => e.type === 'response.completed'),
    "the creator's stream ends after the append, as before",
  );
  // A follower gets the real terminal event, not one made up from the row.
  const followed = await collectEvents(responseEvents(deps, principalOf(userId), id, null, new AbortController().signal, quick));
  t.is(followed.at(-1)!.type, 'response.completed');
  t.is(JSON.parse(followed.at(-1)!.data).response.output[0].content[0].text, 'kept answer');

  appendHeld.open();
  await done;
  t.is(seen.at(-1)!.type, 'response.completed');
  t.deepEqual(
    seen.map((e) => e.sequence_number),
    followed.map((e) => e.sequence_number),
  );
  t.deepEqual(seen.at(-1), JSON.parse(followed.at(-1)!.data));
  await log.stop();
});

const collectEvents = async (stream: AsyncGenerator<KeptEvent[]>) => {
  const all: KeptEvent[] = [];
  for await (const page of stream) all.push(...page);
  return all;
};

test('a response whose row ended without a terminal event gets one made from the stored response, after the ended-wait', async (t) => {
  const userId = newUserId();
  const id = `resp_noend_${process.pid}`;
  await insertBackground(userId, id, 'cancelled');
  await store.appendEvents([keptRow(id, 0, 'response.created'), keptRow(id, 1, 'response.in_progress')]);
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 1 });
  const events = await collectEvents(responseEvents(deps, principalOf(userId), id, null, new AbortController().signal, quick));
  t.deepEqual(
    events.map((e) => [e.sequence_number, e.type]),
    [
      [0, 'response.created'],
      [1, 'response.in_progress'],
      [2, 'response.incomplete'],
    ],
  );
  t.deepEqual(JSON.parse(events[2]!.data), { type: 'response.incomplete', sequence_number: 2, response: { id, status: 'cancelled', output: [] } });
});

test('a running response older than any loop runs ends as the sweep would end it, without waiting for the sweep', async (t) => {
  const userId = newUserId();
  const id = `resp_crashed_${process.pid}`;
  const clock = new ManualClock(Date.now());
  await insertBackground(userId, id, 'in_progress', clock.now());
  await store.appendEvents([keptRow(id, 0, 'response.created'), keptRow(id, 1, 'response.in_progress')]);
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 1, clock });
  const stream = responseEvents(deps, principalOf(userId), id, null, new AbortController().signal, quick);
  t.deepEqual((await stream.next()).value, []);
  t.deepEqual(((await stream.next()).value as KeptEvent[]).map((e) => e.sequence_number), [0, 1]);
  clock.advance(longestLoopMs(deps) + 1);
  const end = (await stream.next()).value as KeptEvent[];
  t.deepEqual(JSON.parse(end[0]!.data), { type: 'response.failed', sequence_number: 2, response: { id, status: 'failed', output: [], error: INTERRUPTED_ERROR } });
  t.true((await stream.next()).done);
  t.is((await store.find(userId, id))!.status, 'in_progress', 'the stream reads; the sweep writes');
});

test('a response ended with no event kept (over the kept time) is a 400 naming stream, after the ended-wait', async (t) => {
  const userId = newUserId();
  const id = `resp_dropped_${process.pid}`;
  await insertBackground(userId, id, 'completed');
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 1 });
  const error = await t.throwsAsync(responseEvents(deps, principalOf(userId), id, null, new AbortController().signal, quick).next(), { instanceOf: ApiError });
  t.is((error as ApiError).status, 400);
  t.is((error as ApiError).param, 'stream');
  t.regex((error as ApiError).message, /no longer kept/);
});

test('the replay reads page after page without waiting between full pages', async (t) => {
  const userId = newUserId();
  const id = `resp_pages_${process.pid}`;
  await insertBackground(userId, id, 'completed');
  await store.appendEvents([...Array.from({ length: 4 }, (_, i) => keptRow(id, i)), keptRow(id, 4, 'response.completed')]);
  // An hour between polls: a stream that paused after a full page would not end in the test.
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 3_600_000 });
  t.deepEqual(await pages(responseEvents(deps, principalOf(userId), id, null, new AbortController().signal, { pageSize: 2 })), [[], [0, 1], [2, 3], [4]]);
});

test('a response deleted while followed ends the stream', async (t) => {
  const userId = newUserId();
  const id = `resp_deleted_${process.pid}`;
  await insertBackground(userId, id);
  await store.appendEvents([keptRow(id, 0, 'response.created')]);
  const deps = responsesDomainDeps(p, store, {} as any, { cancelPollMs: 5 });
  const stream = responseEvents(deps, principalOf(userId), id, null, new AbortController().signal);
  t.deepEqual((await stream.next()).value, []);
  t.deepEqual(((await stream.next()).value as KeptEvent[]).map((e) => e.sequence_number), [0]);
  const next = stream.next();
  t.true(await store.remove(userId, id));
  t.true((await next).done);
});

test('a read the database fails (unavailable) is retried: the stream goes on; another error ends it', async (t) => {
  const userId = newUserId();
  const id = `resp_blip_${process.pid}`;
  await insertBackground(userId, id);
  await store.appendEvents([keptRow(id, 0, 'response.created'), keptRow(id, 1, 'response.completed')]);
  let failures = 0;
  const unavailable = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  const flaky: ResponseStore = {
    ...store,
    eventsAfter: async (...args) => {
      if (failures++ === 0) throw unavailable;
      return store.eventsAfter(...args);
    },
  };
  const deps = responsesDomainDeps(p, flaky, {} as any, { cancelPollMs: 1 });
  const stream = responseEvents(deps, principalOf(userId), id, null, new AbortController().signal);
  t.deepEqual((await stream.next()).value, []);
  t.deepEqual(((await stream.next()).value as KeptEvent[]).map((e) => e.sequence_number), [0, 1], 'read again after the failed read');
  t.true((await stream.next()).done);
  t.is(failures, 2);

  // Not an outage: a bug is not retried.
  const broken: ResponseStore = {
    ...store,
    eventsAfter: async () => {
      throw new Error('syntax error');
    },
  };
  const failing = responseEvents(responsesDomainDeps(p, broken, {} as any, { cancelPollMs: 1 }), principalOf(userId), id, null, new AbortController().signal);
  t.deepEqual((await failing.next()).value, []);
  await t.throwsAsync(failing.next(), { message: 'syntax error' });
});

// Serial (run before the others): a purge pass drops the ended events of every test's responses.
test.serial('cleanup goes in chunks of responses: every ended response is dropped whole, the count is of events', async (t) => {
  const userId = newUserId();
  const old = new Date(Date.now() - 2 * 3_600_000);
  const ids = [1, 2, 3].map((i) => `resp_chunk_${i}_${process.pid}`);
  for (const id of ids) await insertBackground(userId, id, 'completed');
  await store.appendEvents(ids.flatMap((id) => [0, 1, 2].map((i) => ({ ...keptRow(id, i, i === 2 ? 'response.completed' : 'response.output_text.delta'), created_at: old }))));
  t.is(await store.purgeEndedEvents(new Date(Date.now() - 3_600_000), 2), 9);
  for (const id of ids) t.deepEqual(await keptEvents(id), []);
});
