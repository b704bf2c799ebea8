import { ApiError, badRequest, cursorEnvelope, cursorNotFound, estimateTokens, estimateTokensOf, isDependencyUnavailable, keepNewest, newId, notFound, type Clock, type Logger, type Principal } from '../../kit/index.js';
import { toChatMessages, toInputItems, type ChatMessage } from './items.js';
import { CancelledError, longestLoopMs, ProcessStoppingError, runLoop, SERVER_LABEL, toolsUnreachable, type LoopDeps, type LoopPlan } from './loop.js';
import type { LlmPort, MediaPort, ToolsPort, ToolSession } from './ports.js';
import { INTERRUPTED_ERROR } from './purge.js';
import { ResponseRecorder, terminalEventType, type ResponseObject, type StreamEvent } from './recorder.js';
import { endedRow } from './ended.js';
import { EVENTS_KEPT_MS, TERMINAL_EVENTS, type ResponseEventLog } from './event-log.js';
import type { CreateResponseRequest, TextFormat, ToolEntry } from './schemas.js';
import { RUNNING_STATUSES, type ResponseRow, type ResponseStore } from './store.js';

/**
 * Responses of one user: create (foreground, streamed or background), read, list input items,
 * delete, cancel. Loops running in this process are tracked so that a cancel arriving here stops
 * them at once; a cancel arriving at another process sets the database flag, which the running
 * loop reads every `cancelPollMs`.
 */
export interface ResponsesDeps extends LoopDeps {
  store: ResponseStore;
  llm: LlmPort;
  tools: ToolsPort;
  media: MediaPort;
  clock: Clock;
  logger: Logger;
  retentionDays: number;
  cancelPollMs: number;
  /** The most background responses one user may have queued or running at once (none without it). */
  maxBackgroundPerUser?: number;
  running: Map<string, { abort: AbortController; done: Promise<unknown> }>;
  /** Keeps the events of background responses, to be streamed again (none are kept without it). */
  events?: ResponseEventLog;
}

const RUNNING = new Set(RUNNING_STATUSES);
const unix = (ms: number) => Math.floor(ms / 1000);

export interface CreateOptions {
  /** Receives every stream event (streaming callers). */
  onEvent?: (event: StreamEvent) => void;
  /** A promise while the streaming caller's connection is full: the loop reads no more of a step until it settles. */
  drained?: () => Promise<void> | null;
  /** Aborted when the caller goes away (a foreground loop then stops at its next step boundary). */
  signal: AbortSignal;
  /**
   * The project a platform service makes the response in (`X-Gateway-Project-ID`: llm-api's deep
   * research in a project). Every step is made in it, as in a project's conversation; llm-api checks
   * it is the caller's. Ignored when the response belongs to a conversation (whose project counts).
   * A response chained with `previous_response_id` outside a conversation is made in the project of
   * the response it continues; naming another one is a 400 naming `previous_response_id`.
   */
  projectId?: string;
}

export async function createResponse(deps: ResponsesDeps, principal: Principal, input: CreateResponseRequest, options: CreateOptions): Promise<ResponseObject> {
  if (input.previous_response_id && input.conversation) throw badRequest('previous_response_id cannot be used together with conversation', 'conversation');
  const store = input.store !== false;
  if (input.background && !store) throw badRequest('background responses must be stored (store: true)', 'background');

  const inputItems = toInputItems(input.input);
  const current = toChatMessages(inputItems);
  const truncation = input.truncation ?? 'disabled';
  let history: ChatMessage[] = [];
  let conversationId = typeof input.conversation === 'string' ? input.conversation : (input.conversation?.id ?? null);
  /** The conversation's project, read beside its history (awaited once that is read). */
  let project: Promise<string | null> | null = null;
  /** The project of the response chained with `previous_response_id` when it belongs to no conversation. */
  let chainedProject: string | null = null;
  if (input.previous_response_id) {
    const previous = await findEnded(deps, principal, input.previous_response_id);
    if (!previous) throw new ApiError(400, `Previous response with id '${input.previous_response_id}' not found.`, { code: 'previous_response_not_found', param: 'previous_response_id' });
    if (RUNNING.has(previous.status)) throw badRequest(`Previous response '${previous.id}' has not finished yet`, 'previous_response_id');
    conversationId = previous.body.conversation?.id ?? null;
    if (conversationId) project = projectOf(deps, principal, conversationId, options.signal);
    else {
      // A chain outside any conversation stays in the project of the response it continues: its
      // context was made there. A platform service naming another project cannot move it (its
      // history would then be sent under another project's instruction and usage).
      const inherited = previous.project_id ?? null;
      if (inherited && options.projectId && options.projectId !== inherited) {
        throw badRequest(`Previous response '${previous.id}' was made in another project than the one this request names: a chain cannot move to another project`, 'previous_response_id');
      }
      chainedProject = inherited;
    }
    history = previous.context as ChatMessage[];
    if (truncation === 'auto') {
      const budget = await historyBudget(deps, principal, input, current, options.signal);
      history = withoutOrphanedOutputs(await keepNewest<ChatMessage>(history.toReversed(), estimateTokens, budget));
    }
  } else if (conversationId) {
    project = projectOf(deps, principal, conversationId, options.signal);
    const items = deps.llm.conversationHistory(principal, conversationId);
    if (truncation === 'auto') {
      const budget = await historyBudget(deps, principal, input, current, options.signal);
      history = withoutOrphanedOutputs(toChatMessages(await keepNewest(items, itemTokens, budget)));
    } else {
      const all: Array<Record<string, any>> = [];
      for await (const item of items) all.push(item);
      history = toChatMessages(all.reverse());
    }
  }
  const projectId = project ? await project : conversationId === null ? (options.projectId ?? chainedProject) : null;
  await deps.media.checkReferences(principal, inputItems, options.signal);
  // A streamed or background caller is answered 200 before the first step, so a model llm-api does
  // not serve would only show as `response.failed`: it is asked for first (as `truncation: "auto"`
  // does, and reused for RESPONSES_MODEL_CACHE_MS), and an unknown model is the 404 naming `model`
  // that a JSON caller gets from the step.
  if (options.onEvent || input.background) await deps.llm.contextLength(principal, input.model, options.signal);
  const messages = [...history, ...current];
  if (messages.length === 0) throw badRequest('input is required', 'input');
  const unanswered = firstUnansweredCall(messages);
  if (unanswered !== null) throw badRequest(`No tool output found for function call ${unanswered}.`, 'input');
  const orphaned = firstOrphanedOutput(history, inputItems);
  if (orphaned !== null) throw badRequest(`No tool call found for function call output with call_id ${inputItems[orphaned]!.call_id}.`, `input[${orphaned}].call_id`);

  // `tool_choice: "none"` still declares the tools it names (checked like any others); the model is
  // only told not to call them. With `tools` omitted it declares nothing, so nothing is listed.
  const wantsTools = input.tools?.length !== 0 && (input.tool_choice !== 'none' || Boolean(input.tools));
  const session = wantsTools && needsPlatformTools(input) ? await deps.tools.open(principal, options.signal) : null;
  let plan: LoopPlan;
  try {
    plan = await planFor(input, principal, projectId, messages, session);
  } catch (error) {
    await session?.close().catch(() => {});
    throw toolListFailure(deps, error, options.signal);
  }

  const now = deps.clock.now();
  const id = newId('response');
  const response: ResponseObject = {
    id,
    object: 'response',
    created_at: unix(now),
    status: input.background ? 'queued' : 'in_progress',
    background: input.background === true,
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: input.instructions ?? null,
    max_output_tokens: input.max_output_tokens ?? null,
    max_tool_calls: input.max_tool_calls ?? null,
    model: input.model,
    output: [],
    parallel_tool_calls: plan.parallelToolCalls,
    previous_response_id: input.previous_response_id ?? null,
    store,
    temperature: input.temperature ?? 1,
    top_p: input.top_p ?? 1,
    tool_choice: input.tool_choice ?? 'auto',
    tools: (input.tools ?? []).map(echoedTool),
    text: { format: appliedFormat(input.text?.format), ...(input.text?.verbosity ? { verbosity: input.text.verbosity } : {}) },
    reasoning: { effort: input.reasoning?.effort ?? null, summary: input.reasoning?.summary ?? null },
    truncation,
    metadata: input.metadata ?? {},
    user: input.user ?? null,
    safety_identifier: input.safety_identifier ?? null,
    prompt_cache_key: input.prompt_cache_key ?? null,
    // The tier the request is served at (as OpenAI reports the one it used): the platform has one.
    service_tier: 'default',
    top_logprobs: input.top_logprobs ?? null,
    conversation: conversationId ? { id: conversationId } : null,
    usage: null,
    step_usage: [],
  };
  // A foreground response that does not stream is seen by no one while it runs: its id reaches the
  // caller with the finished response, so nothing can retrieve or cancel it before. It is written
  // once, when it ends. A streamed or background response is written first (and after each step),
  // so retrieve and cancel reach it while it runs.
  const seenWhileRunning = store && (response.background || options.onEvent !== undefined);
  const row = (context: unknown[]): ResponseRow => ({
    id,
    user_id: principal.userId,
    status: response.status,
    background: response.background,
    cancel_requested: false,
    body: response,
    context,
    input_items: inputItems,
    // A conversation's project is read from the conversation whenever a chain is created.
    project_id: conversationId ? null : projectId,
    created_at: new Date(now),
    expires_at: new Date(now + deps.retentionDays * 86_400_000),
  });
  if (seenWhileRunning) {
    let refused: ApiError | null = null;
    try {
      const limit = response.background ? deps.maxBackgroundPerUser : undefined;
      if (limit === undefined) await deps.store.insert(row(messages));
      // Rows older than any loop runs are not counted: their process stopped (the sweep ends them).
      else if (!(await deps.store.insertBackground(row(messages), limit, new Date(now - longestLoopMs(deps))))) refused = tooManyBackground(limit);
    } catch (error) {
      // No loop will run to close the tool session (its MCP connection to mcp-tools).
      await session?.close().catch(() => {});
      throw error;
    }
    if (refused) {
      await session?.close().catch(() => {});
      throw refused;
    }
  }

  // A background response's events are kept (to be streamed again), whether or not its creator
  // streams them; it then has events to keep, so its steps are streamed from the provider too.
  const keep = response.background ? deps.events?.recorder(id) : undefined;
  const onEvent = options.onEvent;
  const emit =
    keep && onEvent
      ? (event: StreamEvent) => {
          keep(event);
          onEvent(event);
        }
      : (keep ?? onEvent);
  const recorder = new ResponseRecorder(response, emit, options.drained);
  const abort = new AbortController();
  // A caller that left while the response was prepared (history, checks, the insert) is gone already:
  // its abort event fired before anyone listened.
  let callerGone = !input.background && options.signal.aborted;
  // A response that is not stored keeps nothing once its caller left (deep research is one): the
  // step and the tool calls in flight are aborted at once, rather than finished and paid for unseen.
  const onCallerGone = () => {
    callerGone = true;
    if (!store) abort.abort(new CancelledError());
  };
  if (!input.background) options.signal.addEventListener('abort', onCallerGone, { once: true });
  const execute = async () => {
    const queued = response.status === 'queued';
    recorder.start();
    const watcher = seenWhileRunning ? watchCancel(deps, id, abort) : null;
    let context: ChatMessage[] | undefined;
    let failure: unknown = null;
    try {
      // A progress write only lets GET show the partial response: one the database fails (a blip, a
      // failover) is logged and the loop goes on, rather than the whole response failing for it.
      // The final write decides how the response is stored (and ends it `failed` if it fails too).
      const progress = seenWhileRunning
        ? () =>
            deps.store
              .save(id, { status: response.status, body: response })
              .catch((error) => deps.logger.warn({ err: (error as Error).message, response_id: id }, 'storing the progress of a response failed: the loop goes on'))
        : async () => {};
      if (queued) await progress();
      const result = await runLoop(deps, plan, recorder, abort.signal, () => callerGone, progress);
      context = result.messages;
      if (response.status === 'completed' || response.status === 'incomplete') response.completed_at = unix(deps.clock.now());
    } catch (error) {
      recorder.interruptText();
      recorder.interruptCalls('The response ended before this call did');
      // What the loop produced so far (tool calls and outputs, text) is kept for chaining, as replayed items.
      context = [...messages, ...toChatMessages(response.output)];
      if (abort.signal.reason instanceof ProcessStoppingError) {
        // The process stops: stored as a crash leaves it (the sweep's error), not as a user's cancel.
        response.status = 'failed';
        response.error = { ...INTERRUPTED_ERROR };
        failure = new ApiError(503, INTERRUPTED_ERROR.message);
      } else if (error instanceof CancelledError || abort.signal.aborted) response.status = 'cancelled';
      else {
        failure = error;
        response.status = 'failed';
        const status = error instanceof ApiError ? error.status : 500;
        response.error = { code: status === 429 ? 'rate_limit_exceeded' : status < 500 ? 'invalid_prompt' : 'server_error', message: error instanceof ApiError ? error.message : 'The response failed' };
        if (!(error instanceof ApiError)) deps.logger.error({ err: (error as Error).message, response_id: id }, 'response loop failed');
      }
    } finally {
      if (watcher) clearInterval(watcher);
      await session?.close().catch(() => {});
    }
    // A response always ends stored in a terminal state: one that cannot be stored ends `failed`
    // (`response.failed` on a stream). Should even that write fail, the sweep of responses left
    // running (purge.ts) ends the row once no loop can still be running it.
    let unstored: ApiError | null = null;
    let append: (() => Promise<void>) | null = null;
    if (store) {
      // False when the row had ended without this loop: a cancel that found no loop answering
      // (`endRunning`) or the sweep. The stored end stands, and the turn is not the conversation's.
      let written = true;
      try {
        if (seenWhileRunning) written = await deps.store.save(id, { status: response.status, body: response, context: context ?? messages });
        else await deps.store.insert(row(context ?? messages));
      } catch (error) {
        deps.logger.error({ err: (error as Error).message, response_id: id }, 'storing the response failed');
        unstored = isDependencyUnavailable(error) ? new ApiError(503, 'The response could not be stored: the database is unavailable') : new ApiError(500, 'The response could not be stored');
        response.status = 'failed';
        response.completed_at = null;
        response.error = { code: 'server_error', message: unstored.message };
        if (seenWhileRunning) await deps.store.save(id, { status: response.status, body: response }).catch(() => {});
      }
      if (!written) {
        deps.logger.warn({ response_id: id, status: response.status }, 'the response had ended (cancelled, interrupted) or was deleted before its loop finished: its end is not stored');
        endAsStored(response, await deps.store.find(principal.userId, id).catch(() => undefined));
      } else if (conversationId && response.status === 'completed') {
        append = () =>
          deps.llm
            .appendConversationItems(principal, conversationId, [...inputItems, ...response.output].map(conversationItem), {
              model: response.model,
              usage: response.usage,
              answerFrom: inputItems.length,
            })
            .catch((error) => deps.logger.warn({ err: (error as Error).message, response_id: id }, 'writing conversation items failed'));
      }
    }
    if (keep) {
      // The row says the response ended: the event log gets its terminal event now, not after the
      // conversation append (up to a step's timeout), so a follower never waits for it longer than
      // it waits before making one up. The creator's own stream still ends after the append.
      const end = recorder.end();
      keep(end);
      await append?.();
      onEvent?.(end);
    } else {
      await append?.();
      recorder.finish();
    }
    // A foreground JSON response that could not be stored has no row: its id would lead nowhere.
    if (unstored && !response.background && !options.onEvent) throw unstored;
    // A foreground JSON caller whose response failed before any output gets the error itself (429,
    // 400, 502 …, as from chat completions), so the SDK raises it and retries what it retries; the
    // stored row still says `failed`. With output already produced, the partial response is the answer.
    if (failure !== null && !response.background && !options.onEvent && response.output.length === 0) throw failure;
    return response;
  };
  const done = execute().finally(() => deps.running.delete(id));
  deps.running.set(id, { abort, done });
  if (input.background && !options.onEvent) {
    done.catch((error) => deps.logger.error({ err: (error as Error).message, response_id: id }, 'background response failed'));
    return structuredClone({ ...response, status: 'queued' });
  }
  return done;
}

/**
 * Seconds a client refused for too many background responses is told to wait before trying again.
 * No wait is right (a place frees when one of its responses ends), so a short one: the SDK's own
 * retries try again soon without hammering the database.
 */
const BACKGROUND_RETRY_AFTER_S = 5;

function tooManyBackground(limit: number): ApiError {
  return new ApiError(429, `Too many background responses in progress: at most ${limit} may be queued or running at once per user. Wait for one to end (or cancel one) and try again.`, {
    code: 'too_many_background_responses',
    param: 'background',
    headers: { 'retry-after': String(BACKGROUND_RETRY_AFTER_S) },
  });
}

/**
 * The project of the response's conversation, asked of llm-api while the history is read. Should
 * the history fail first, the request fails with that error and this one is not waited for (its
 * rejection is handled here, so it is never left unhandled).
 */
function projectOf(deps: ResponsesDeps, principal: Principal, conversationId: string, signal: AbortSignal): Promise<string | null> | null {
  const project = deps.llm.conversationProject?.(principal, conversationId, signal);
  if (!project) return null;
  project.catch(() => {});
  return project;
}

/**
 * `truncation: "auto"`: the tokens the history may take, i.e. the model's context window less the
 * output reserved by `max_output_tokens`, the instructions and the request's own input (which are
 * always sent whole). Unbounded when llm-api knows no context window for the model.
 */
async function historyBudget(deps: ResponsesDeps, principal: Principal, input: CreateResponseRequest, current: ChatMessage[], signal: AbortSignal): Promise<number> {
  const context = await deps.llm.contextLength(principal, input.model, signal);
  if (context === null) return Number.POSITIVE_INFINITY;
  const instructions = input.instructions ? estimateTokens({ content: input.instructions }) : 0;
  return context - (input.max_output_tokens ?? 0) - instructions - estimateTokensOf(current);
}

/** What a stored item costs as the chat messages it is replayed as. */
const itemTokens = (item: Record<string, any>) => estimateTokensOf(toChatMessages([item]));

/**
 * A truncated history holds no tool output whose call was dropped (providers refuse a tool message
 * that answers no call of an earlier assistant turn): a cut may fall before the history's first
 * tool output, or between two calls of one turn whose outputs follow them. A call always comes
 * before its output, so a cut that only drops the oldest messages leaves no call without its output.
 */
function withoutOrphanedOutputs(history: ChatMessage[]): ChatMessage[] {
  const called = new Set<unknown>();
  const kept = history.filter((message) => {
    if (message.role === 'assistant' && Array.isArray(message.tool_calls)) for (const call of message.tool_calls) called.add(call?.id);
    return message.role !== 'tool' || called.has(message.tool_call_id);
  });
  return kept.length === history.length ? history : kept;
}

/**
 * The id of a tool call no tool message answers before the conversation goes on (or ends), as
 * OpenAI refuses it: a client function the previous response returned (`function_call`) needs its
 * `function_call_output` in the input that continues it. Refused here, naming `input`, rather than
 * by the provider a step later. Platform tool calls always carry their output (an interrupted one
 * its error), so only a client's function can be left unanswered.
 */
function firstUnansweredCall(messages: ChatMessage[]): string | null {
  let open = new Set<string>();
  for (const message of messages) {
    if (message.role === 'tool') {
      open.delete(message.tool_call_id);
      continue;
    }
    if (open.size > 0) break;
    if (message.role === 'assistant' && Array.isArray(message.tool_calls)) open = new Set(message.tool_calls.map((call: { id: string }) => call.id));
  }
  return open.size > 0 ? [...open][0]! : null;
}

/**
 * The index of the first `function_call_output` of the input that answers no call made before it
 * (in the history or an earlier input item), as OpenAI refuses it. Sent on, it would be a tool
 * message answering nothing, which the provider refuses a step later (naming its own `messages`
 * field), or which a streamed or background caller would only see as `response.failed`.
 */
function firstOrphanedOutput(history: ChatMessage[], items: Array<Record<string, any>>): number | null {
  const called = new Set<unknown>();
  for (const message of history) if (message.role === 'assistant' && Array.isArray(message.tool_calls)) for (const call of message.tool_calls) called.add(call?.id);
  const at = items.findIndex((item) => {
    if (item.type === 'function_call') called.add(item.call_id);
    return item.type === 'function_call_output' && !called.has(item.call_id);
  });
  return at < 0 ? null : at;
}

/**
 * mcp-tools failing to list its tools, before anything runs: 503 when it cannot be reached, 502 for
 * any other failure. A refusal of the request itself (an ApiError, e.g. an unknown tool) and the
 * caller's own abort stay as they are.
 */
function toolListFailure(deps: ResponsesDeps, error: unknown, signal: AbortSignal): unknown {
  if (error instanceof ApiError || signal.aborted) return error;
  deps.logger.warn({ err: (error as Error).message }, 'listing the tools of mcp-tools failed');
  return toolsUnreachable(error)
    ? new ApiError(503, 'The tools service (mcp-tools) is unreachable', { cause: error })
    : new ApiError(502, 'The tools service (mcp-tools) failed to list its tools', { cause: error });
}

/** Reads the cancel flag while the loop runs (a cancel may arrive at any process). */
function watchCancel(deps: ResponsesDeps, id: string, abort: AbortController) {
  let reading = false;
  const timer = setInterval(() => {
    if (reading || abort.signal.aborted) return;
    reading = true;
    deps.store
      .cancelRequested(id)
      .then((flag) => flag && abort.abort(new CancelledError()))
      .catch(() => {})
      .finally(() => (reading = false));
  }, deps.cancelPollMs);
  timer.unref();
  return timer;
}

/**
 * A tool as the response echoes it: a bare tool name as the `mcp` tool it stands for; a function
 * with `parameters` and `strict` null when the client left them out (the SDK's `FunctionTool` has
 * both, nullable); an mcp tool without the null `authorization`, `connector_id` and `tunnel_id`.
 */
function echoedTool(tool: ToolEntry): Record<string, unknown> {
  if (typeof tool === 'string') return { type: 'mcp', server_label: SERVER_LABEL, allowed_tools: [tool] };
  if (tool.type === 'function') return { ...tool, parameters: tool.parameters ?? null, strict: tool.strict ?? null };
  // The SDK's `Tool.Mcp` has no null for these (they are only taken as null): a typed client reading
  // the echo must not find one. `headers` may be null there; an empty map (no header) is echoed so.
  const mcp: Record<string, unknown> = { ...tool };
  for (const key of ['authorization', 'connector_id', 'tunnel_id']) if (mcp[key] === null) delete mcp[key];
  if (mcp.headers !== undefined) mcp.headers = null;
  return mcp;
}

function needsPlatformTools(input: CreateResponseRequest): boolean {
  if (!input.tools) return true;
  return input.tools.some((t) => typeof t === 'string' || t.type === 'mcp');
}

async function planFor(input: CreateResponseRequest, principal: Principal, projectId: string | null, messages: ChatMessage[], session: ToolSession | null): Promise<LoopPlan> {
  const available = session ? await session.list() : [];
  const byName = new Map(available.map((t) => [t.name, t]));
  const chosen = new Set<string>();
  /** The label of the first entry offering each tool: a bare name or an unlabelled entry is SERVER_LABEL, as echoed. */
  const serverLabels = new Map<string, string>();
  const functionTools: LoopPlan['functionTools'] = [];
  /** Where each client function was declared (`tools[i]`), to name it when its name is taken. */
  const functionAt: number[] = [];
  if (!input.tools) available.forEach((t) => chosen.add(t.name));
  (input.tools ?? []).forEach((entry, index) => {
    const allowedTools = typeof entry !== 'string' && entry.type === 'mcp' ? entry.allowed_tools : null;
    // `allowed_tools` as the SDK's `McpToolFilter`: the tools it names (all without `tool_names`),
    // of those the ones whose read-only annotation is `read_only` when it is given.
    const filter = allowedTools && !Array.isArray(allowedTools) ? allowedTools : null;
    const names = typeof entry === 'string' ? [entry] : entry.type === 'mcp' ? ((filter ? filter.tool_names : (allowedTools as string[] | null | undefined)) ?? available.map((t) => t.name)) : null;
    const readOnly = typeof filter?.read_only === 'boolean' ? filter.read_only : null;
    if (names) {
      for (const name of names) {
        if (!byName.has(name)) throw badRequest(`tools[${index}]: '${name}' is not an available tool`, `tools[${index}]`);
        if (readOnly !== null && (byName.get(name)!.readOnly === true) !== readOnly) continue;
        chosen.add(name);
        if (!serverLabels.has(name)) serverLabels.set(name, (typeof entry !== 'string' && entry.type === 'mcp' && entry.server_label) || SERVER_LABEL);
      }
    } else if (typeof entry !== 'string' && entry.type === 'function') {
      // Only the fields of a chat completions function: the Responses API's own (`defer_loading`,
      // `output_schema`, `allowed_callers`, as the SDK's type has them) and any other key are echoed,
      // never sent to a provider, which refuses a parameter it does not know. An optional field sent
      // as null (`description: null`, as the SDK's type allows) is left out: chat completions take no null there.
      const fn: { name: string } & Record<string, unknown> = { name: entry.name };
      if (entry.description !== undefined && entry.description !== null) fn.description = entry.description;
      fn.parameters = entry.parameters ?? { type: 'object', properties: {} };
      if (entry.strict !== undefined && entry.strict !== null) fn.strict = entry.strict;
      functionTools.push({ type: 'function', function: fn });
      functionAt.push(index);
    }
  });
  // The model is offered one function per name: a second client function of the same name, or one
  // named like a platform tool offered beside it, would be two tools the model cannot tell apart
  // (and a call to the name would run only one of them).
  const functionNames = new Set<string>();
  functionTools.forEach((tool, k) => {
    const name = tool.function.name;
    if (functionNames.has(name) || chosen.has(name)) throw badRequest(`tools[${functionAt[k]}]: a tool named '${name}' is already offered; tool names must be unique`, `tools[${functionAt[k]}].name`);
    functionNames.add(name);
  });
  const sampling: Record<string, unknown> = {};
  if (input.temperature !== undefined && input.temperature !== null) sampling.temperature = input.temperature;
  if (input.top_p !== undefined && input.top_p !== null) sampling.top_p = input.top_p;
  const responseFormat = chatResponseFormat(appliedFormat(input.text?.format));
  if (responseFormat) sampling.response_format = responseFormat;
  if (input.text?.verbosity) sampling.verbosity = input.text.verbosity;
  if (input.reasoning?.effort) sampling.reasoning_effort = input.reasoning.effort;
  // A choice the model could not follow is refused before anything runs, as OpenAI refuses it: a
  // named tool must be one of the tools offered (a platform tool for `{type: "mcp"}`), and
  // `required` or a named tool needs a tool to call. `{type: "mcp"}` without a name (a call of one
  // of the server's tools) is `required`: the platform tools are the only MCP server.
  let toolChoice: unknown = input.tool_choice ?? 'auto';
  const offered = (name: string) => chosen.has(name) || functionNames.has(name);
  /** `allowed_tools`: the tools the model is offered, among those declared (all of them otherwise). */
  let allowed: { platform: Set<string>; functions: Set<string> } | null = null;
  if (toolChoice && typeof toolChoice === 'object' && (toolChoice as { type: string }).type === 'allowed_tools') {
    allowed = allowedTools(toolChoice as Record<string, unknown>, chosen, functionNames);
    toolChoice = (toolChoice as { mode: string }).mode;
  } else if (toolChoice && typeof toolChoice === 'object') {
    const { type, name } = toolChoice as { type: string; name?: string | null };
    if (!CHOICE_TYPES.has(type)) throw badRequest(`tool_choice type '${type}' is not supported: use 'function', 'mcp' or 'allowed_tools' (or 'none', 'auto', 'required')`, 'tool_choice.type');
    if (type === 'mcp' && !name) {
      if (chosen.size === 0) throw badRequest('tool_choice requires a platform tool, and none is offered', 'tool_choice');
      toolChoice = 'required';
    } else {
      if (!name) throw badRequest('tool_choice needs the name of a tool', 'tool_choice');
      if (type === 'mcp' ? !chosen.has(name) : !offered(name)) throw badRequest(`tool_choice names '${name}', which is not one of the tools offered`, 'tool_choice.name');
      toolChoice = { type: 'function', function: { name } };
    }
  } else if (toolChoice === 'required' && chosen.size === 0 && functionTools.length === 0) {
    throw badRequest("tool_choice 'required' needs at least one tool in tools", 'tool_choice');
  }
  const maxSteps = input.max_steps ?? 8;
  const answerOnLastStep = input.answer_on_last_step === true;
  // One step cannot both have to call a tool and have to answer without one.
  if (answerOnLastStep && maxSteps === 1 && (toolChoice === 'required' || (toolChoice && typeof toolChoice === 'object'))) {
    throw badRequest('answer_on_last_step with max_steps 1 leaves no step for the tool call tool_choice requires', 'answer_on_last_step');
  }
  return {
    principal,
    projectId,
    model: input.model,
    instructions: input.instructions ?? null,
    messages,
    session,
    mcpTools: [...chosen].filter((name) => !allowed || allowed.platform.has(name)).map((name) => {
      const t = byName.get(name)!;
      return { type: 'function' as const, function: { name, ...(t.description ? { description: t.description } : {}), parameters: t.inputSchema } };
    }),
    functionTools: allowed ? functionTools.filter((tool) => allowed.functions.has(tool.function.name)) : functionTools,
    toolChoice,
    parallelToolCalls: input.parallel_tool_calls !== false,
    maxToolCalls: input.max_tool_calls ?? null,
    maxSteps,
    answerOnLastStep,
    maxOutputTokens: input.max_output_tokens ?? null,
    sampling,
    serverLabels,
  };
}

/** The object forms of `tool_choice` that name tools this service offers. */
const CHOICE_TYPES = new Set(['function', 'mcp', 'custom']);

/**
 * `tool_choice: {type: "allowed_tools", mode, tools}`: the model is offered only the tools listed
 * (every step; the response still declares and echoes all of them), and `mode` (`auto` or
 * `required`) is the choice. An entry is `{type: "function", name}` (a client function declared in
 * `tools`) or `{type: "mcp", server_label, name?}` (a platform tool offered, all of them without a
 * name); one naming a tool that is not offered is a 400 naming it.
 */
function allowedTools(choice: Record<string, unknown>, platform: Set<string>, functions: Set<string>) {
  if (choice.mode !== 'auto' && choice.mode !== 'required') throw badRequest("tool_choice.mode must be 'auto' or 'required'", 'tool_choice.mode');
  if (!Array.isArray(choice.tools) || choice.tools.length === 0) throw badRequest('tool_choice.tools must list at least one tool', 'tool_choice.tools');
  const allowed = { platform: new Set<string>(), functions: new Set<string>() };
  choice.tools.forEach((entry: any, i: number) => {
    const param = `tool_choice.tools[${i}]`;
    const name = typeof entry?.name === 'string' && entry.name ? entry.name : null;
    if (entry?.type === 'function' && name && functions.has(name)) allowed.functions.add(name);
    else if (entry?.type === 'mcp' && name && platform.has(name)) allowed.platform.add(name);
    else if (entry?.type === 'mcp' && !name && platform.size > 0) platform.forEach((tool) => allowed.platform.add(tool));
    else throw badRequest(`${param} is not one of the tools offered (a {type: 'function', name} declared in tools, or a {type: 'mcp', server_label, name?} platform tool)`, param);
  });
  return allowed;
}

/** The format a response applies, as requested (`strict` false when not given); `text` by default. */
function appliedFormat(format: TextFormat | null | undefined): Record<string, unknown> & { type: string } {
  if (!format || format.type === 'text') return { type: 'text' };
  if (format.type === 'json_object') return { type: 'json_object' };
  const { name, schema, strict, description } = format;
  return { type: 'json_schema', name, schema, strict: strict ?? false, ...(description ? { description } : {}) };
}

/**
 * The format as chat completions' `response_format`, sent with every step: the Responses API's
 * flat `json_schema` fields go under `json_schema`; `text` sends nothing.
 */
function chatResponseFormat(applied: Record<string, unknown> & { type: string }): Record<string, unknown> | null {
  if (applied.type === 'text') return null;
  if (applied.type === 'json_object') return { type: 'json_object' };
  const { type, ...jsonSchema } = applied;
  return { type, json_schema: jsonSchema };
}

/**
 * A response whose row had ended without its loop (`store.save` wrote nothing) ends as the row did:
 * its stream's terminal event and its answer carry the stored response (the output its last write
 * kept, the status the cancel or the sweep gave it), as a retrieve returns it, never the loop's own
 * `completed`. A deleted row (or one that cannot be read) ends `cancelled`: a delete cancels a
 * running response, and only a cancel or a delete end a row this early.
 */
function endAsStored(response: ResponseObject, stored: ResponseRow | undefined): void {
  if (!stored) {
    response.status = 'cancelled';
    response.completed_at = null;
    return;
  }
  for (const key of Object.keys(response)) delete response[key];
  Object.assign(response, stored.body);
}

/** An item as llm-api's conversation store takes it: the store assigns its own ids. */
function conversationItem(item: Record<string, any>): Record<string, unknown> {
  const { id: _id, ...rest } = item;
  return rest;
}

export async function getResponse(deps: ResponsesDeps, principal: Principal, id: string): Promise<ResponseObject> {
  return (await findOwned(deps, principal, id)).body as ResponseObject;
}

/** A kept event, as a stream writes it again. */
export interface KeptEvent {
  sequence_number: number;
  type: string;
  data: string;
}

/** Kept events read per query while a stream catches up. */
const REPLAY_PAGE = 500;
/**
 * How long a stream waits for the terminal event of a response whose row has ended. The loop stores
 * its end and at once queues its terminal event, which the event log writes within a statement
 * (later only while event writes fail); only a process that stopped before writing it (its response
 * ended by the sweep, or by a cancel no loop answered) leaves none. It also bounds how long the
 * stream retries reads while the database is unavailable.
 */
const ENDED_WAIT_MS = 5000;

/** Knobs of `responseEvents` a test turns down (the defaults are the service's). */
export interface FollowOptions {
  endedWaitMs?: number;
  pageSize?: number;
}

/**
 * The events of a background response of the caller after `startingAfter` (all when null), as
 * `GET /v1/responses/{id}?stream=true` sends them: the kept ones first, then new ones as the loop
 * writes them (read from the database every `cancelPollMs`, so the loop may run in any process),
 * until the terminal event. Each yield is a page of events in order, the first one empty: refusals
 * (404, 400 naming `stream`) come before it, while the answer can still be a JSON error. A
 * response whose row ended without a terminal event (its process stopped) ends with one made from
 * the stored response; so does one still running past the longest a loop runs (`longestLoopMs`: its
 * process stopped and the sweep has not ended it yet), as `response.failed` with the sweep's error.
 * A response deleted meanwhile ends the stream; so does `signal` (the client left). A read the
 * database fails (unavailable) is retried, for up to `endedWaitMs`.
 */
export async function* responseEvents(deps: ResponsesDeps, principal: Principal, id: string, startingAfter: number | null, signal: AbortSignal, options: FollowOptions = {}): AsyncGenerator<KeptEvent[]> {
  // As stored (a stale row is ended below, with its kept events first): the stream reads, the sweep writes.
  const row = await deps.store.find(principal.userId, id);
  if (!row) throw notFound(`Response with id '${id}' not found.`);
  if (!row.background) throw badRequest(`Response '${id}' was not created with background: true: only a background response can be streamed again (its events are not kept); retrieve it without stream`, 'stream');
  let after = startingAfter ?? -1;
  const pageSize = options.pageSize ?? REPLAY_PAGE;
  const endedPolls = Math.max(1, Math.ceil((options.endedWaitMs ?? ENDED_WAIT_MS) / deps.cancelPollMs));
  let last = await deps.store.lastEvent(id);
  // A row that ended with no event kept: its events may still be on their way (a loop stores its
  // end a moment before its last batch), or they were dropped after the kept time.
  for (let poll = 0; !last && !RUNNING.has(row.status) && poll < endedPolls && !signal.aborted; poll++) {
    await pause(deps.cancelPollMs, signal);
    last = await deps.store.lastEvent(id);
  }
  if (!last && !RUNNING.has(row.status)) throw badRequest(`The events of response '${id}' are no longer kept (they are kept for ${EVENTS_KEPT_MS / 60_000} minutes after it ends); retrieve it without stream`, 'stream');
  if (last && TERMINAL_EVENTS.has(last.type) && last.sequence_number <= after) return;
  // Accepted: the caller opens its stream now, before the first event (which may be a while coming).
  yield [];
  let quietSinceEnd = 0;
  let failedPolls = 0;
  while (!signal.aborted) {
    let page: KeptEvent[];
    let status: string | undefined;
    try {
      page = await deps.store.eventsAfter(id, after, pageSize);
      if (page.length === 0) status = await deps.store.statusOf(principal.userId, id);
      failedPolls = 0;
    } catch (error) {
      // The stream is open: a database blip pauses it (as long as an ended response's terminal
      // event is waited for) rather than cutting the client off mid-stream.
      if (!isDependencyUnavailable(error) || ++failedPolls > endedPolls) throw error;
      deps.logger.warn({ err: (error as Error).message, response_id: id }, 'reading the events of a followed response failed: retrying');
      await pause(deps.cancelPollMs, signal);
      continue;
    }
    if (page.length > 0) {
      yield page;
      after = page.at(-1)!.sequence_number;
      if (TERMINAL_EVENTS.has(page.at(-1)!.type)) return;
      quietSinceEnd = 0;
      if (page.length === pageSize) continue;
    } else {
      if (status === undefined) return;
      if (RUNNING.has(status) && deps.clock.now() - row.created_at.getTime() > longestLoopMs(deps)) {
        // Older than any loop runs: the process running it stopped, and the sweep has not ended
        // its row yet (it may never: RESPONSES_PURGE_INTERVAL_MS=0). The stream ends as the sweep
        // will end the row, rather than waiting for it.
        const stale = await deps.store.find(principal.userId, id);
        if (stale) yield [storedEnd({ ...stale, ...endedRow(stale, { status: 'failed', error: INTERRUPTED_ERROR }) }, after + 1)];
        return;
      }
      if (!RUNNING.has(status) && ++quietSinceEnd >= endedPolls) {
        const ended = await deps.store.find(principal.userId, id);
        if (ended) yield [storedEnd(ended, after + 1)];
        return;
      }
    }
    await pause(deps.cancelPollMs, signal);
  }
}

/** The terminal event of a response that ended without its loop writing one: the stored response, as its loop would have sent it. */
function storedEnd(row: ResponseRow, sequenceNumber: number): KeptEvent {
  const type = terminalEventType(row.status);
  return { sequence_number: sequenceNumber, type, data: JSON.stringify({ type, sequence_number: sequenceNumber, response: row.body }) };
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

async function findOwned(deps: ResponsesDeps, principal: Principal, id: string): Promise<ResponseRow> {
  const row = await findEnded(deps, principal, id);
  if (!row) throw notFound(`Response with id '${id}' not found.`);
  return row;
}

/**
 * A response of the caller as stored. One still queued or running past the longest a loop runs
 * (`longestLoopMs`) has no loop left: the process running it stopped. It is ended here as the sweep
 * ends it (`failed` with the interrupted error), not answered `in_progress` until the next purge
 * pass (up to RESPONSES_PURGE_INTERVAL_MS later, never when that is 0), so a client polling it, a
 * cancel and a `previous_response_id` chaining from it all see the end a stream of it sees.
 */
async function findEnded(deps: ResponsesDeps, principal: Principal, id: string): Promise<ResponseRow | undefined> {
  const row = await deps.store.find(principal.userId, id);
  if (!row || !RUNNING.has(row.status)) return row;
  const createdBefore = deps.clock.now() - longestLoopMs(deps);
  if (row.created_at.getTime() >= createdBefore) return row;
  if (await deps.store.endRunning(principal.userId, id, (stale) => endedRow(stale, { status: 'failed', error: INTERRUPTED_ERROR }))) {
    deps.logger.warn({ response_id: id }, 'a response left running by a stopped process marked failed');
  }
  return deps.store.find(principal.userId, id);
}

export async function listInputItems(deps: ResponsesDeps, principal: Principal, id: string, query: { limit: number; order: 'asc' | 'desc'; after?: string; before?: string }) {
  const row = await findOwned(deps, principal, id);
  const items = query.order === 'asc' ? [...row.input_items] : [...row.input_items].reverse();
  // The items between the cursors: after `after`, before `before`. `before` alone is the page just
  // before it (its `limit` items nearest to it, `has_more` when earlier ones remain); otherwise the
  // page starts right after `after` (or at the start), `has_more` when later ones remain.
  const from = query.after ? cursorIndex(items, query.after, 'after') + 1 : 0;
  const to = query.before ? cursorIndex(items, query.before, 'before') : items.length;
  if (query.before && !query.after) {
    const start = Math.max(0, to - query.limit);
    return cursorEnvelope(items.slice(start, to), start > 0);
  }
  const data = items.slice(from, Math.min(to, from + query.limit));
  return cursorEnvelope(data, from + data.length < to);
}

function cursorIndex(items: Array<{ id: string }>, id: string, param: 'after' | 'before'): number {
  const at = items.findIndex((item) => item.id === id);
  if (at < 0) throw cursorNotFound(param, id);
  return at;
}

export async function deleteResponse(deps: ResponsesDeps, principal: Principal, id: string) {
  await findOwned(deps, principal, id);
  deps.running.get(id)?.abort.abort(new CancelledError());
  await deps.store.remove(principal.userId, id);
  return { id, object: 'response.deleted', deleted: true };
}

/**
 * Sets the cancel flag; the process running the loop aborts its in-flight calls and stores the
 * partial output as `cancelled`. A background response that already ended is returned unchanged;
 * a foreground one that ended is a 400, as OpenAI answers it. When no loop
 * answers within `waitMs` (every live loop reads the flag each `cancelPollMs`), the process that
 * ran it has stopped: the row is ended `cancelled` here, with the output its last write kept,
 * rather than answered `in_progress` until the sweep ends it `failed` an hour later.
 */
export async function cancelResponse(deps: ResponsesDeps, principal: Principal, id: string, waitMs: number): Promise<ResponseObject> {
  const row = await findOwned(deps, principal, id);
  if (!RUNNING.has(row.status)) {
    // As OpenAI answers: an ended background response is returned as it is (a repeated cancel is
    // harmless), while an ended foreground one was never cancellable. A foreground response that is
    // still streaming can be cancelled here, which OpenAI does not offer.
    if (!row.background) throw badRequest(`Only responses created with background=true can be cancelled: response '${id}' was not, and it has ended (${row.status})`);
    return row.body as ResponseObject;
  }
  await deps.store.requestCancel(principal.userId, id);
  const local = deps.running.get(id);
  if (local) {
    local.abort.abort(new CancelledError());
    await local.done.catch(() => {});
  } else {
    const until = Date.now() + waitMs;
    while (Date.now() < until) {
      const current = await deps.store.find(principal.userId, id);
      if (!current || !RUNNING.has(current.status)) break;
      await new Promise((r) => setTimeout(r, deps.cancelPollMs));
    }
    if (await deps.store.endRunning(principal.userId, id, (running) => endedRow(running, { status: 'cancelled' }))) {
      deps.logger.warn({ response_id: id }, 'a cancelled response no process was running ended cancelled');
    }
  }
  return getResponse(deps, principal, id);
}
