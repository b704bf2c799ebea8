import test from 'ava';
import { toChatMessages } from '../../services/response-api/responses/items.js';

// A conversation written by chat completions, read by the Responses loop: a custom tool's call and
// its output are items of their own there, and must reach the loop's chat steps, not vanish.
test('a stored custom tool call and its output become a function call taking {input} and its tool message', (t) => {
  const messages = toChatMessages([
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'search' }] },
    { type: 'custom_tool_call', call_id: 'call_c', name: 'grep', input: 'needle' },
    { type: 'custom_tool_call_output', call_id: 'call_c', output: 'found' },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'done' }] },
  ]);
  t.deepEqual(messages, [
    { role: 'user', content: 'search' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_c', type: 'function', function: { name: 'grep', arguments: '{"input":"needle"}' } }] },
    { role: 'tool', tool_call_id: 'call_c', content: 'found' },
    { role: 'assistant', content: 'done' },
  ]);
});

test('a custom tool call without a name or call id is left out, as a function call would be', (t) => {
  t.deepEqual(toChatMessages([{ type: 'custom_tool_call', call_id: '', name: 'grep', input: 'x' }, { type: 'custom_tool_call', call_id: 'c', input: 'x' }]), []);
});
