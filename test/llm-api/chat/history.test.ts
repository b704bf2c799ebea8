import test from 'ava';
import { estimateTokensOf } from '../../../services/kit/index.js';
import { fitToContext } from '../../../services/llm-api/chat/history.js';
import type { HistoryItem } from '../../../services/llm-api/conversations/index.js';

// A stored conversation replayed as chat messages: tool-calling turns become an assistant message
// with `tool_calls` followed by the `tool` messages answering them, kept or dropped whole, so the
// provider never gets a `tool` message without its call (or a call without its answer).

/** Items in stored order (oldest first) → what openHistory yields: newest first, with positions. */
async function* newestFirst(items: Array<Record<string, unknown>>): AsyncGenerator<HistoryItem> {
  for (let i = items.length - 1; i >= 0; i--) {
    const body = items[i]!;
    yield { type: String(body.type), role: typeof body.role === 'string' ? body.role : null, content: body.content, position: i + 1, body };
  }
}

const user = (text: string) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text }] });
const assistant = (text: string) => ({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] });
const call = (id: string, name = 'lookup') => ({ type: 'function_call', call_id: id, name, arguments: `{"id":"${id}"}`, status: 'completed' });
const output = (id: string) => ({ type: 'function_call_output', call_id: id, output: `result ${id}`, status: 'completed' });
const toolCall = (id: string, name = 'lookup') => ({ id, type: 'function', function: { name, arguments: `{"id":"${id}"}` } });
const fit = (items: Array<Record<string, unknown>>, current: any[] = [{ role: 'user', content: 'now' }], budget = Number.POSITIVE_INFINITY) => fitToContext([], newestFirst(items), current, budget);

test('a tool-calling turn is replayed as one assistant message with its calls (and the text stored with them), then the results', async (t) => {
  const messages = await fit([user('find'), assistant('Looking.'), call('c1'), call('c2', 'fetch'), output('c1'), output('c2'), assistant('Found it.')]);
  t.deepEqual(messages, [
    { role: 'user', content: 'find' },
    { role: 'assistant', content: 'Looking.', tool_calls: [toolCall('c1'), toolCall('c2', 'fetch')] },
    { role: 'tool', tool_call_id: 'c1', content: 'result c1' },
    { role: 'tool', tool_call_id: 'c2', content: 'result c2' },
    { role: 'assistant', content: 'Found it.' },
    { role: 'user', content: 'now' },
  ]);
});

test("calls the conversation ends with are replayed when the request's tool messages answer them, and only then", async (t) => {
  const stored = [user('find'), { type: 'reasoning', summary: [{ type: 'summary_text', text: 'hmm' }] }, call('c1'), call('c2')];
  const answering = [{ role: 'tool', tool_call_id: 'c1', content: 'r1' }, { role: 'tool', tool_call_id: 'c2', content: 'r2' }];
  t.deepEqual(await fit(stored, answering), [{ role: 'user', content: 'find' }, { role: 'assistant', content: null, tool_calls: [toolCall('c1'), toolCall('c2')] }, ...answering]);
  // A new user message instead: the unanswered calls are not sent (providers refuse them).
  t.deepEqual(await fit(stored), [{ role: 'user', content: 'find' }, { role: 'user', content: 'now' }]);
  // Only c1 answered: only c1 is replayed.
  t.deepEqual((await fit(stored, answering.slice(0, 1)))[1], { role: 'assistant', content: null, tool_calls: [toolCall('c1')] });
});

test('tool results without their call are not replayed: stored before the calls were, or trimmed away with them', async (t) => {
  // A result stored alone (its call was never stored), and a tool message stored by an older release without a call id.
  const messages = await fit([user('a'), output('c0'), { type: 'message', role: 'tool', content: [{ type: 'input_text', text: 'old' }] }, assistant('b')]);
  t.deepEqual(messages, [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'now' }]);
  // A result whose call id is not among the turn's calls.
  t.deepEqual((await fit([user('a'), call('c1'), output('c1'), output('zz')]))[2], { role: 'tool', tool_call_id: 'c1', content: 'result c1' });
});

test('trimming to the context keeps or drops a tool-calling turn as a whole', async (t) => {
  const stored = [user('first question'), call('c1'), output('c1'), assistant('answer')];
  const all = await fit(stored);
  t.is(all.length, 5);
  // Room for the last answer and the result, but not the call: both go, never the result alone.
  const current = [{ role: 'user', content: 'now' }];
  // The budget for the request's message and the newest n stored messages.
  const budgetFor = (n: number) => estimateTokensOf(current) + estimateTokensOf(all.slice(-1 - n, -1));
  const trimmed = await fit(stored, current, budgetFor(2));
  t.deepEqual(trimmed, [{ role: 'assistant', content: 'answer' }, ...current]);
  const roomy = await fit(stored, current, budgetFor(3));
  t.deepEqual(roomy.map((m) => m.role), ['assistant', 'tool', 'assistant', 'user']);
  t.is(roomy[0]!.tool_calls?.[0]?.id, 'c1');
});

test('a stored image keeps a detail the chat API takes; another (the conversations API stores items as sent) is replayed without it', async (t) => {
  const image = (detail: string) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'see' }, { type: 'input_image', image_url: 'https://example.com/a.png', detail }] });
  const replayed = await fit([image('low'), assistant('ok'), image('original'), assistant('ok')]);
  t.deepEqual(replayed[0], { role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'low' } }] });
  t.deepEqual(replayed[2], { role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] });
});
