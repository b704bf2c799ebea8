import test from 'ava';
import type { Principal } from '../../services/kit/index.js';
import { runLoop, type LoopPlan } from '../../services/response-api/responses/loop.js';
import type { ChatCompletion, LlmPort } from '../../services/response-api/responses/ports.js';
import { ResponseRecorder } from '../../services/response-api/responses/recorder.js';

// The tool loop's own history when a provider gives tool calls without ids (or the same id twice):
// every tool message answers a call of its own by an id that is not empty, as llm-api requires of
// a tool message; otherwise the step after the tool calls is refused.
const principal: Principal = { userId: 'user_1', subject: 'user_1', email: null, username: 'u', authMethod: 'apikey', isAdmin: false, isGuest: false } as any;

function scriptedLlm(answers: ChatCompletion[]) {
  const bodies: any[] = [];
  const llm: LlmPort = {
    async complete(_principal, body) {
      bodies.push(structuredClone(body));
      return answers[Math.min(bodies.length - 1, answers.length - 1)]!;
    },
    async appendConversationItems() {},
    conversationHistory: async function* () {},
    async contextLength() {
      return null;
    },
  };
  return { llm, bodies };
}

const plan = (functionTools: LoopPlan['functionTools'] = []): LoopPlan => ({
  principal,
  model: 'm',
  instructions: null,
  messages: [{ role: 'user', content: 'hi' }],
  session: null,
  mcpTools: [],
  functionTools,
  toolChoice: 'auto',
  parallelToolCalls: true,
  maxToolCalls: null,
  maxSteps: 8,
  answerOnLastStep: false,
  maxOutputTokens: null,
  sampling: {},
});

const call = (id: string | undefined, name: string) => ({ ...(id === undefined ? {} : { id }), function: { name, arguments: '{}' } }) as any;

test('tool calls without ids, or with one id twice, get ids of their own; each tool message answers its call', async (t) => {
  const { llm, bodies } = scriptedLlm([
    { choices: [{ message: { content: null, tool_calls: [call(undefined, 'a'), call('', 'b')] }, finish_reason: 'tool_calls' }] },
    { choices: [{ message: { content: null, tool_calls: [call('dup', 'c'), call('dup', 'd')] }, finish_reason: 'tool_calls' }] },
    { choices: [{ message: { content: 'done' }, finish_reason: 'stop' }] },
  ]);
  const recorder = new ResponseRecorder({ id: 'resp_1', status: 'in_progress', output: [] });
  const result = await runLoop({ llm, toolTimeoutMs: 1000, stepTimeoutMs: 1000 }, plan(), recorder, new AbortController().signal, () => false);
  t.is(recorder.response.status, 'completed');
  t.is(bodies.length, 3);

  const last = bodies[2].messages as any[];
  const calls = last.filter((m) => m.role === 'assistant' && m.tool_calls).flatMap((m) => m.tool_calls.map((c: any) => c.id));
  const answered = last.filter((m) => m.role === 'tool').map((m) => m.tool_call_id);
  t.is(calls.length, 4);
  t.true(calls.every((id: unknown) => typeof id === 'string' && id !== ''), JSON.stringify(calls));
  t.is(new Set(calls).size, 4, 'the ids are distinct');
  t.deepEqual(answered, calls, 'each tool message answers one call, in order');
  t.is(calls[2], 'dup', 'an id the provider gave is kept where it is the first of its kind');
  t.deepEqual(result.messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id), calls);
});

test("a client function called without an id is returned with the id its output continues from", async (t) => {
  const { llm } = scriptedLlm([{ choices: [{ message: { content: null, tool_calls: [call(undefined, 'get_weather')] }, finish_reason: 'tool_calls' }] }]);
  const recorder = new ResponseRecorder({ id: 'resp_2', status: 'in_progress', output: [] });
  const fn = [{ type: 'function' as const, function: { name: 'get_weather', parameters: {} } }];
  const result = await runLoop({ llm, toolTimeoutMs: 1000, stepTimeoutMs: 1000 }, plan(fn), recorder, new AbortController().signal, () => false);
  const item = recorder.response.output.find((i) => i.type === 'function_call')!;
  t.regex(item.call_id, /^call_\w+$/);
  t.is(result.messages.at(-1)!.tool_calls[0].id, item.call_id, 'the history the next response continues from names the same call');
});
