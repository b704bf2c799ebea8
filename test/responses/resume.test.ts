import test from 'ava';
import { BadRequestError, NotFoundError } from 'openai';
import { ManualClock, type Principal } from '../../services/kit/index.js';
import { createResponseEventLog } from '../../services/response-api/responses/event-log.js';
import { startRetentionPurge } from '../../services/response-api/responses/purge.js';
import type { StreamEvent } from '../../services/response-api/responses/recorder.js';
import { responseEvents, type KeptEvent } from '../../services/response-api/responses/responses.js';
import { createResponseStore, type ResponseEventRow, type ResponseStore } from '../../services/response-api/responses/store.js';
import { checkStream, MODEL, responsesDomainDeps, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// Streaming a background response again: `GET /v1/responses/{id}?stream=true&starting_after=N`
// (the SDK's `responses.retrieve(id, {stream: true, starting_after})`) replays the kept events
// after N, then follows the running loop through the database until the terminal event. Through
// the edge with the official SDK, and the event log's batching and cleanup against the database.
let p: ResponsesPlatform;
let store: ResponseStore;

test.before(async () => {
  p = await startResponsesPlatform({ RESPONSES_PURGE_INTERVAL_MS: '0' });
  store = createResponseStore(p.runtime.db.knex);
});
test.after.always(async () => {
  await p?.stop();
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
  t.deepEqual(all.slice(0, 2).map((e) => [e.type, e.response.status]), [['response.created', 'queued'], ['response.in_progress', 'in_progress']]);

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
const principalOf = (userId: string): Principal => ({ userId, subject: userId, email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false });
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

test('cleanup: events of responses ended over the kept time are dropped whole; running ones and recent ones stay; purged responses take theirs', async (t) => {
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
