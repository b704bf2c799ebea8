import { ApiError, isDependencyUnavailable, randomBase62, storableText, type Principal } from '../../kit/index.js';
import type { ChatMessage } from './items.js';
import type { ChatCompletion, LlmPort, ToolSession } from './ports.js';
import type { ResponseRecorder } from './recorder.js';

/**
 * The tool loop: each step asks llm-api for a chat completion; tool calls in the answer run
 * against mcp-tools (in parallel when allowed, otherwise one per step; each with a timeout) and their outputs, errors
 * included, go back to the model; the loop ends when the model answers without tool calls, when
 * it calls a function the client executes itself, or at `maxSteps` (whose step may be asked to
 * answer without tools, `answerOnLastStep`; platform tools it still calls are not run).
 *
 * Two ways to stop early: `abort` (a cancel, or the caller of an unstored response leaving) aborts
 * the in-flight upstream and tool calls at once;
 * `stopAtBoundary()` (a foreground client went away) is checked before each step.
 */
export const SERVER_LABEL = 'jan';

export interface LoopDeps {
  llm: LlmPort;
  toolTimeoutMs: number;
  stepTimeoutMs: number;
}

export interface LoopPlan {
  principal: Principal;
  /**
   * The project of the response's conversation (its own, or the one a `previous_response_id`
   * chain is in), or, outside a conversation, the one a platform service made the response in (deep
   * research) or the response it continues with `previous_response_id` was made in: every step is made in it, so llm-api prepends the project's instruction and
   * attributes the step's usage to it. Absent or null: none.
   */
  projectId?: string | null;
  model: string;
  instructions: string | null;
  /** History and input, without the instructions. */
  messages: ChatMessage[];
  session: ToolSession | null;
  /** Platform tools the model may call, as chat-completions function tools. */
  mcpTools: Array<{ type: 'function'; function: { name: string; description?: string; parameters: Record<string, unknown> } }>;
  /** Functions the client executes itself. */
  functionTools: Array<{ type: 'function'; function: Record<string, unknown> & { name: string } }>;
  toolChoice: unknown;
  parallelToolCalls: boolean;
  maxToolCalls: number | null;
  maxSteps: number;
  /**
   * The last step is sent with `tool_choice: "none"` (the tools still declared, as the history's
   * calls name them): a model still calling tools must answer from what it has, rather than the
   * response ending `incomplete` at `max_steps` with no answer (deep research asks for this).
   */
  answerOnLastStep: boolean;
  /**
   * The response's output budget (`max_output_tokens`), over all its steps as OpenAI counts it:
   * each step is sent what earlier steps left of it as `max_completion_tokens`, and a response
   * whose steps spent it ends `incomplete` with `max_output_tokens` before asking another.
   */
  maxOutputTokens: number | null;
  /** Passed to every step as they are: sampling, `response_format`, `verbosity`, `reasoning_effort`. */
  sampling: Record<string, unknown>;
  /**
   * The `server_label` of each platform tool's `mcp_call` items: the label of the first tool entry
   * that offers it (a client matches calls to the servers it declared by it); SERVER_LABEL for a
   * tool no labelled entry offers.
   */
  serverLabels?: ReadonlyMap<string, string>;
}

export interface StepUsage {
  step: number;
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

export interface LoopResult {
  /** The conversation the loop ended with (history, input and every step), for chaining. */
  messages: ChatMessage[];
  steps: StepUsage[];
}

/**
 * The longest a loop can run once its response is stored: every step (at most 8) at its timeout and
 * its tool calls at theirs (they run in parallel), plus 2 minutes a step for connecting to mcp-tools
 * (the MCP SDK bounds a request at 60 s) and the step's writes. A response still queued or running
 * after that has no loop left: the process that ran it stopped.
 */
export function longestLoopMs(deps: Pick<LoopDeps, 'stepTimeoutMs' | 'toolTimeoutMs'>): number {
  return 8 * (deps.stepTimeoutMs + deps.toolTimeoutMs + 120_000);
}

export class CancelledError extends Error {
  constructor() {
    super('The response was cancelled');
  }
}

/**
 * The abort reason of a loop whose process stops (a graceful stop) while it runs. Not a cancel:
 * the response is stored `failed` with the error a crash leaves (`INTERRUPTED_ERROR`, purge.ts), so
 * a stop and a crash look alike and a polling client can tell it from a user's cancel and retry.
 */
export class ProcessStoppingError extends Error {
  constructor() {
    super('The process running the response is stopping');
  }
}

/**
 * A connection to mcp-tools that could not be made or broke (fetch's "fetch failed", a refused or
 * reset connection), as opposed to an answer of mcp-tools.
 */
export const toolsUnreachable = (error: unknown): boolean => (error instanceof TypeError && error.message === 'fetch failed') || isDependencyUnavailable(error);

/**
 * U+0000 and unpaired surrogates: every service refuses them in a request (llm-api takes each step as
 * one, its conversation items API each turn) and PostgreSQL cannot store them, yet a provider's or a
 * tool's text may hold them (a program printing `chr(0)`). The loop replaces each with U+FFFD as the
 * text arrives (the kit's `storableText`), so the client, the next step, the response, its stored
 * copy and its conversation's items all carry the same text.
 *
 * A streamed piece may end inside a surrogate pair that the next piece completes: a high surrogate
 * ending a piece is held for the next one, and one still held when the step ends (`flush`) was
 * unpaired. The pieces handed on thus join to `storableText` of the step's whole text.
 */
function storableDeltas(send: (delta: string) => void) {
  let held = '';
  return {
    push(delta: string): void {
      const text = held ? held + delta : delta;
      const last = text.charCodeAt(text.length - 1);
      held = last >= 0xd800 && last <= 0xdbff ? text.slice(-1) : '';
      const whole = held ? text.slice(0, -1) : text;
      if (whole) send(storableText(whole));
    },
    flush(): void {
      if (held) send('\ufffd');
      held = '';
    },
  };
}

const firstStepOnly = (choice: unknown) => (choice === 'required' || (choice && typeof choice === 'object') ? 'auto' : choice);

/** `progress` stores the partial response (GET shows it) when tool calls start and after each step. */
export async function runLoop(
  deps: LoopDeps,
  plan: LoopPlan,
  recorder: ResponseRecorder,
  abort: AbortSignal,
  stopAtBoundary: () => boolean,
  progress: () => Promise<unknown> = async () => {},
): Promise<LoopResult> {
  const response = recorder.response;
  const messages = [...plan.messages];
  const steps: StepUsage[] = [];
  const clientFunctions = new Set(plan.functionTools.map((t) => t.function.name));
  const platformTools = new Set(plan.mcpTools.map((t) => t.function.name));
  const tools = [...plan.mcpTools, ...plan.functionTools];
  let toolCalls = 0;
  /** The call ids the loop's messages use so far (each tool message answers exactly one call). */
  const ids = new Set<string>();

  let outputTokens = 0;

  for (let step = 1; step <= plan.maxSteps; step++) {
    if (abort.aborted || stopAtBoundary()) throw new CancelledError();
    const budgetLeft = plan.maxOutputTokens === null ? null : plan.maxOutputTokens - outputTokens;
    if (budgetLeft !== null && budgetLeft <= 0) {
      response.status = 'incomplete';
      response.incomplete_details = { reason: 'max_output_tokens' };
      return { messages, steps };
    }
    const body: Record<string, unknown> = {
      model: plan.model,
      messages: plan.instructions ? [{ role: 'system', content: plan.instructions }, ...messages] : messages,
      ...plan.sampling,
    };
    if (budgetLeft !== null) body.max_completion_tokens = budgetLeft;
    if (tools.length > 0 && plan.toolChoice !== 'none') {
      body.tools = tools;
      body.tool_choice = plan.answerOnLastStep && step === plan.maxSteps ? 'none' : step === 1 ? (plan.toolChoice ?? 'auto') : firstStepOnly(plan.toolChoice ?? 'auto');
      body.parallel_tool_calls = plan.parallelToolCalls;
    }
    let completion: ChatCompletion;
    const stepTimeout = AbortSignal.timeout(deps.stepTimeoutMs);
    try {
      // A streaming caller sees the text as the provider writes it; a non-streaming one gets the step whole.
      const textPieces = recorder.streaming ? storableDeltas((delta) => recorder.textDelta(delta)) : null;
      const refusalPieces = recorder.streaming ? storableDeltas((delta) => recorder.refusalDelta(delta)) : null;
      const onDelta = textPieces && refusalPieces ? { text: textPieces.push, refusal: refusalPieces.push, drained: recorder.drained } : undefined;
      completion = await deps.llm.complete(plan.principal, body, AbortSignal.any([abort, stepTimeout]), onDelta, plan.projectId);
      textPieces?.flush();
      refusalPieces?.flush();
    } catch (error) {
      if (abort.aborted) throw new CancelledError();
      if (stepTimeout.aborted) throw new ApiError(504, `The chat completion of step ${step} did not finish within ${deps.stepTimeoutMs} ms`, { cause: error });
      throw error;
    }
    const used = addUsage(response, step, completion);
    steps.push(used);
    outputTokens += used.output_tokens;
    const choice = completion.choices?.[0];
    const content = storableText(choice?.message?.content ?? '');
    // A refusal (OpenAI's structured refusal) is the step's answer as much as its text: a `refusal`
    // part of its message, and in the history the turn's text (as a refusal in the input is replayed).
    const refusal = storableText(typeof choice?.message?.refusal === 'string' ? choice.message.refusal : '');
    const answer = { text: content, refusal };
    // What the message's parts hold, joined (blank text beside a refusal makes no part).
    const said = refusal && !content.trim() ? refusal : content + refusal;
    // parallel_tool_calls: false is honoured even when the model returns several calls: the first
    // is run and kept, the rest are dropped (as if the model had asked for one); it calls again next step.
    const asked = (choice?.message?.tool_calls ?? []).map((c) => ({ ...c, id: callId(c.id, ids), function: { name: storableText(c.function.name ?? ''), arguments: storableText(c.function.arguments ?? '') } }));
    const calls = plan.parallelToolCalls ? asked : asked.slice(0, 1);

    // The provider stopped the text (at the token limit, `length`, or by its content filter), or the
    // token limit cut the step inside its tool calls: their arguments may be cut too, so none is run
    // (nor returned to the client) and the response ends incomplete, as it does for text.
    if (calls.length === 0 || choice?.finish_reason === 'length') {
      const cutOff = choice?.finish_reason === 'length' ? 'max_output_tokens' : choice?.finish_reason === 'content_filter' ? 'content_filter' : null;
      recorder.endText(answer, true, cutOff ? 'incomplete' : 'completed');
      messages.push({ role: 'assistant', content: said });
      if (cutOff) {
        response.status = 'incomplete';
        response.incomplete_details = { reason: cutOff };
      } else response.status = 'completed';
      return { messages, steps };
    }

    recorder.endText(answer, false);
    messages.push({ role: 'assistant', content: said || null, tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: c.function })) });

    // Platform tools run now; calls of the client's own functions are returned to it.
    const platformCalls = calls.filter((c) => !clientFunctions.has(c.function.name));
    // With calls of the client's own functions in it, the step ends the response `completed` and
    // the conversation goes on (the client answers them): the platform calls' outputs will be read.
    const lastStep = step === plan.maxSteps && platformCalls.length === calls.length;
    if (lastStep) {
      // No step is left to read their outputs: running them would spend the tools' time (and a
      // sandbox's) for nothing. They are kept, not run, and a chain from the response reads why.
      const error = `max_steps (${plan.maxSteps}) reached: this call was not run.`;
      for (const call of platformCalls) {
        recorder.unrunMcpCall({ name: call.function.name, arguments: call.function.arguments, serverLabel: plan.serverLabels?.get(call.function.name) ?? SERVER_LABEL }, error);
        messages.push({ role: 'tool', tool_call_id: call.id, content: `Error: ${error}` });
      }
    }
    const started = (lastStep ? [] : platformCalls).map((call) => ({ call, index: recorder.startMcpCall({ name: call.function.name, arguments: call.function.arguments, serverLabel: plan.serverLabels?.get(call.function.name) ?? SERVER_LABEL }) }));
    await progress();
    const run = async ({ call }: (typeof started)[number]) => {
      if (!platformTools.has(call.function.name) || !plan.session) return { output: '', error: `Tool '${call.function.name}' does not exist. Available tools: ${[...platformTools].join(', ') || 'none'}.` };
      if (plan.maxToolCalls !== null && ++toolCalls > plan.maxToolCalls) return { output: '', error: `max_tool_calls (${plan.maxToolCalls}) reached: this call was not run.` };
      return callTool(deps, plan.session, call.function, abort);
    };
    const results = await Promise.all(started.map(run));
    if (abort.aborted) {
      started.forEach(({ index }) => recorder.finishMcpCall(index, { output: '', error: 'cancelled' }));
      throw new CancelledError();
    }
    started.forEach(({ call, index }, k) => {
      const { output, error } = results[k]!;
      const result = { output: storableText(output), error: error === null ? null : storableText(error) };
      recorder.finishMcpCall(index, result);
      messages.push({ role: 'tool', tool_call_id: call.id, content: result.error ? `Error: ${result.error}` : result.output });
    });

    const clientCalls = calls.filter((c) => clientFunctions.has(c.function.name));
    if (clientCalls.length > 0) {
      for (const call of clientCalls) recorder.functionCall({ call_id: call.id, name: call.function.name, arguments: call.function.arguments });
      response.status = 'completed';
      return { messages, steps };
    }
    await progress();
  }
  response.status = 'incomplete';
  response.incomplete_details = { reason: 'max_steps' };
  return { messages, steps };
}

/**
 * A tool call's id as the history carries it. A provider may give none (or an empty one, or one an
 * earlier call already had): the tool message answering the call needs an id of its own, which
 * llm-api requires of a tool message, so the next step would be refused. Such a call gets a new id.
 * A given id is made storable first (llm-api refuses a NUL in the next step's `tool_call_id` too).
 */
function callId(given: unknown, taken: Set<string>): string {
  const storable = typeof given === 'string' ? storableText(given) : '';
  const id = storable !== '' && !taken.has(storable) ? storable : `call_${randomBase62(24)}`;
  taken.add(id);
  return id;
}

async function callTool(deps: LoopDeps, session: ToolSession, fn: { name: string; arguments: string }, abort: AbortSignal): Promise<{ output: string; error: string | null }> {
  let args: Record<string, unknown>;
  try {
    const parsed = JSON.parse(fn.arguments || '{}');
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    args = parsed;
  } catch {
    return { output: '', error: `The arguments of '${fn.name}' are not a JSON object.` };
  }
  try {
    const result = await session.call(fn.name, args, { signal: abort, timeoutMs: deps.toolTimeoutMs });
    return result.isError ? { output: '', error: result.output || 'the tool failed' } : { output: result.output, error: null };
  } catch (error) {
    if (abort.aborted) return { output: '', error: 'cancelled' };
    const message = (error as Error).message ?? String(error);
    // -32001 is the MCP SDK's RequestTimeout (our per-call bound).
    const timedOut = (error as { code?: unknown }).code === -32001;
    if (timedOut) return { output: '', error: `The tool did not answer within ${deps.toolTimeoutMs} ms.` };
    return { output: '', error: toolsUnreachable(error) ? 'The tools service (mcp-tools) is unreachable.' : `The tool failed: ${message}` };
  }
}

function addUsage(response: Record<string, any>, step: number, completion: ChatCompletion): StepUsage {
  const u = completion.usage ?? {};
  const entry = { step, input_tokens: u.prompt_tokens ?? 0, output_tokens: u.completion_tokens ?? 0, total_tokens: u.total_tokens ?? (u.prompt_tokens ?? 0) + (u.completion_tokens ?? 0) };
  const usage = (response.usage ??= {
    input_tokens: 0,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 0,
  });
  usage.input_tokens += entry.input_tokens;
  usage.output_tokens += entry.output_tokens;
  usage.total_tokens += entry.total_tokens;
  usage.input_tokens_details.cached_tokens += u.prompt_tokens_details?.cached_tokens ?? 0;
  usage.input_tokens_details.cache_write_tokens += u.prompt_tokens_details?.cache_write_tokens ?? 0;
  usage.output_tokens_details.reasoning_tokens += u.completion_tokens_details?.reasoning_tokens ?? 0;
  response.step_usage = [...(response.step_usage ?? []), entry];
  return entry;
}
