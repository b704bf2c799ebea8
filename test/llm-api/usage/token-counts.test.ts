import test from 'ava';
import { Readable } from 'node:stream';
import { ManualClock } from '../../../services/kit/index.js';
import { normalizeCompletion } from '../../../services/llm-api/chat/normalize.js';
import type { ChatCompletion } from '../../../services/llm-api/chat/types.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';
import { cleanUsage, tokenCount } from '../../../services/llm-api/usage/token-counts.js';
import { startRelay } from '../../helpers/relay.js';

/** A logger that keeps what the usage paths log about odd counts: field and request id. */
function invalidLog() {
  const reported: string[] = [];
  const requests: unknown[] = [];
  const log = {
    error(fields: object, message: string) {
      const { field, request_id } = fields as { field: string; request_id: unknown };
      reported.push(field);
      requests.push(request_id);
      if (!message.includes('not a non-negative integer')) throw new Error(`unexpected message ${message}`);
    },
  };
  return { log, reported, requests };
}

// Token counts enter through a JSON answer, a stream's usage chunk and the meter; each reads them
// through one helper, so the usage table only ever gets integers its columns take.

test('tokenCount takes non-negative integers (and strings of digits) only', (t) => {
  for (const good of [0, 7, 1_000_000_000, '10']) t.is(tokenCount(good), Number(good));
  for (const bad of [12.5, -1, 1e300, Number.NaN, Infinity, '12.5', '-3', '1e3', ' 5', '', null, undefined, true, {}, [3]]) t.is(tokenCount(bad), undefined, String(bad));
});

test('cleanUsage: an odd count becomes 0 and is reported, an odd reasoning count is removed, the total is the sum', (t) => {
  const { log, reported, requests } = invalidLog();
  const usage = cleanUsage({ prompt_tokens: 12.5, completion_tokens: '5', total_tokens: 17.5, completion_tokens_details: { reasoning_tokens: -2, other: 1 }, extra: 'x' }, log, 'req_clean');
  t.deepEqual(usage, { prompt_tokens: 0, completion_tokens: 5, total_tokens: 5, completion_tokens_details: { other: 1 }, extra: 'x' });
  t.deepEqual(reported, ['prompt_tokens', 'completion_tokens_details.reasoning_tokens']);
  t.deepEqual(requests, ['req_clean', 'req_clean']);
});

test('a JSON answer with a fractional count: the client and the meter both get integers', (t) => {
  const { log, reported, requests } = invalidLog();
  const body = normalizeCompletion({ choices: [], usage: { prompt_tokens: 12.5, completion_tokens: 3, total_tokens: 15.5 } } as unknown as ChatCompletion, 'm', 1, log, 'req_json');
  t.deepEqual(body.usage, { prompt_tokens: 0, completion_tokens: 3, total_tokens: 3 });
  t.deepEqual(reported, ['prompt_tokens']);
  t.deepEqual(requests, ['req_json']);
});

test('a streamed usage chunk is captured as integers, and the event still goes out as the provider sent it', async (t) => {
  const usage = { prompt_tokens: '10', completion_tokens: 5.5, total_tokens: 15, completion_tokens_details: { reasoning_tokens: '2' } };
  const first = `data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, delta: { content: 'hi' } }] })}\n\n`;
  const rest = `data: ${JSON.stringify({ id: 'c', choices: [], usage })}\n\ndata: [DONE]\n\n`;
  const { log, reported, requests } = invalidLog();
  // The request id travels in the relay's options: the log is the chat path's logger itself.
  const relay = startRelay(first, Readable.from([Buffer.from(rest)]), { clientWantsUsage: true, usageLog: log, requestId: 'req_stream' });
  const sent: string[] = [];
  for await (const event of relay.events) sent.push(JSON.stringify(event));
  const outcome = await relay.done;
  t.deepEqual(outcome.usage as unknown, { prompt_tokens: 10, completion_tokens: 0, total_tokens: 10, completion_tokens_details: { reasoning_tokens: 2 } });
  t.deepEqual(reported, ['completion_tokens']);
  t.deepEqual(requests, ['req_stream']);
  t.true(sent.some((e) => e.includes('5.5')), 'the usage event reaches the client unchanged');
});

test('the meter records integer counts and their sum whatever it is given', (t) => {
  const records: UsageRecord[] = [];
  const meters = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock: new ManualClock(0), elapsed: () => 0 });
  const meter = meters.open({ requestId: 'r', userId: 'u', authMethod: null, apiKeyId: null, model: 'm', stream: true, metadata: null, startedAt: 0 });
  const given = { prompt_tokens: '10', completion_tokens: 5, completion_tokens_details: { reasoning_tokens: 0.5 } } as unknown as { prompt_tokens: number };
  meter.close({ status: 200, outcome: 'ok', usage: given });
  t.like(records[0], { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, reasoning_tokens: 0 });
  t.is((given as { prompt_tokens: unknown }).prompt_tokens, '10', "the caller's object is left as it was");
});
