import { ApiError, badRequest, decodeUtf8, encodeWithRawMembers, estimateTextTokens, estimateTokens, estimateTokensOf, isPending, unixSeconds, type Cancellation, type RawJsonMembers, type CancelSignal, type Clock, type MaybePromise, type Principal } from '../../kit/index.js';
import { modelNotFound, type ResolvedModel } from '../models/registry.js';
import { ClientClosed, type Attempt } from '../routing/failover.js';
import type { UpstreamResponse } from '../routing/upstream.js';
import type { UsageMeter, UsageMeters } from '../usage/meter.js';
import type { ChatLimits } from './config.js';
import type { ChatDispatcher } from './dispatch.js';
import { isPlainObject, normalizeCompletion } from './normalize.js';
import { deepResearch, type ResearchDeps } from './research.js';
import { FORWARDED_MEMBERS, upstreamBody, type ChatRequest } from './schemas.js';
import { relayStream, type StreamEvent, type StreamOutcome } from './stream.js';
import type { AnswerToolCall, AssistantMessage, ChatCompletion, CompletionChoice, ConversationRef, Usage } from './types.js';
import type { UsageReport } from '../../kit/index.js';

/**
 * POST /v1/chat/completions as a domain function: resolve the model from memory, choose the served
 * model (`enable_thinking: false` → the instruct model), lend the conversation's history, run the
 * message steps, dispatch with failover, and return the answer as JSON or as a stream of events
 * (chat/routes.ts writes them). Usage: one meter per request, closed once.
 */

export type ChatMessage = ChatRequest['messages'][number];

/**
 * `store`/`conversation`: a conversation lends its history and (with `store: true`) receives the
 * exchange. `prepare` only reads (a conversation that `store: true` creates is named, not yet
 * written), so a request refused before the provider is called leaves nothing behind.
 */
export interface ConversationSessions {
  prepare(input: ChatRequest, principal: Principal, model: ResolvedModel): Promise<ConversationSession | null>;
  /**
   * The caller's project a request without a conversation is made in (`ChatInput.projectId`: a
   * platform service's `X-Gateway-Project-ID`), or null when it is not the caller's. Absent: such
   * a request is made in no project.
   */
  project?(projectId: string, principal: Principal): Promise<ProjectContext | null>;
}

/** A project a request is made in: the usage is attributed to it, its instruction (if any) is the first system message. */
export interface ProjectContext {
  projectId: string;
  system: ChatMessage | null;
}

/** The answer `store: true` keeps: its text, reasoning and tool calls (choice 0). */
export interface StoredAnswer {
  content: string;
  reasoning: string;
  toolCalls: readonly AnswerToolCall[] | null;
  status: 'completed' | 'incomplete';
  model: string;
  usage: Usage | null;
}

export interface ConversationSession {
  messages: ChatMessage[];
  conversation: ConversationRef;
  /** The conversation's project, which the request's usage is attributed to. */
  projectId: string | null;
  /** The project's instruction when `messages` starts with it (deep research leaves it to its steps). */
  projectSystem?: ChatMessage | null;
  /**
   * With `store: true`, readies the input for storing (inline images uploaded as media): called once
   * nothing can refuse the request any more, just before the provider is called. A 4xx refuses it.
   */
  stage(): Promise<void>;
  /**
   * Persists the exchange: the latest input message (or the tool results it ends with) and the
   * answer, creating the conversation first when the request named none.
   */
  finish(answer: StoredAnswer): Promise<void>;
}

/**
 * A step that rewrites the messages before dispatch, after the conversation's history was added
 * (e.g. resolving the caller's media references into data the provider can read). Steps run in
 * order; a step throws an ApiError (4xx) to refuse the request.
 */
export type MessageStep = (principal: Principal, messages: ChatMessage[], signal: CancelSignal) => MaybePromise<ChatMessage[]>;

export interface ChatDeps {
  registry: { resolve(id: string): ResolvedModel | undefined };
  dispatcher: ChatDispatcher;
  usage: UsageMeters;
  /** Budgets and model allow-lists: refuses (403/429) before anything goes upstream. */
  admission?: { admit(principal: Principal, model: string, served?: string): MaybePromise<{ settle(spent: { cost: number; tokens: number }): Promise<void> } | null> };
  conversations?: ConversationSessions;
  clock: Clock;
  limits: ChatLimits;
  messageSteps?: MessageStep[];
  /** `deep_research: true`: the Response API's tool loop (absent: such requests are refused with 503). */
  research?: ResearchDeps;
  /** Failures after the answer was handed over (storing a streamed answer) are logged here. */
  logger: { error(fields: object, message: string): void };
  /** Set only with `LOG_PROMPTS=true`: each request's messages are logged here (with its request id). */
  promptLog?: { info(fields: object, message: string): void };
}

export interface ChatInput {
  request: ChatRequest;
  requestId: string;
  /** `performance.now()` when the request arrived (latency in the usage record counts from there). */
  startedAt?: number;
  /** The bytes `request`'s FORWARDED_MEMBERS arrived as, when they stand for them: sent on instead of serialised again. */
  rawMembers?: RawJsonMembers;
  /**
   * The project a platform service makes the request in (`X-Gateway-Project-ID`, which the edge
   * strips from clients): response-api's steps of a response in a project's conversation. Checked
   * to be the caller's; ignored when the request names a conversation (whose project counts).
   */
  projectId?: string;
}

/**
 * `report`: model, provider and tokens for the edge's access log (a stream's is known when it ends);
 * absent for deep research, whose steps run in response-api.
 */
export type ChatResult =
  | { kind: 'json'; body: ChatCompletion; report?: UsageReport }
  | { kind: 'stream'; events: AsyncIterable<StreamEvent>; done: Promise<StreamOutcome>; report?: Promise<UsageReport> };

function usageReport(model: string, providerId: string, usage: { prompt_tokens?: number; completion_tokens?: number } | null | undefined): UsageReport {
  const prompt = usage?.prompt_tokens ?? 0;
  const completion = usage?.completion_tokens ?? 0;
  return { model, provider: providerId, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * The usage the gateway records for an answer the provider reported none for, by the kit's rule
 * (kit `context-window.ts`: 4 characters per token): the prompt from the messages sent (history and
 * message steps included) and the tool definitions by their JSON, the completion from the answer's
 * text, `answerChars` characters (every choice; `reasoningChars` of them reasoning). The one
 * estimate of both paths: a stream's text as the relay counted it (`streamUsage`), a JSON answer's
 * as `answerUsage` counts it. Called only on the rare path without a report.
 */
function estimatedUsage(request: ChatRequest, answerChars: number, reasoningChars: number): Usage {
  let prompt = estimateTokensOf(request.messages);
  const tools = request.tools ?? request.functions;
  if (tools && tools.length > 0) prompt += estimateTokens({ tool_calls: tools });
  const completion = estimateTextTokens(answerChars);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, completion_tokens_details: { reasoning_tokens: estimateTextTokens(reasoningChars) } };
}

/**
 * A stream's usage: the provider's report, or, when the stream ended without one (the client left,
 * the deadline, a failure mid-stream, a provider that sends none), the estimate from the answer text
 * the relay counted as it passed it on (`relayedChars`).
 */
function streamUsage(request: ChatRequest, outcome: StreamOutcome): Usage {
  return outcome.usage ?? estimatedUsage(request, outcome.relayedChars, outcome.relayedReasoningChars);
}

/**
 * The estimated usage of a JSON answer without a `usage` object (a normalized one: every choice has
 * a message). Its text is what the relay counts in a stream (`countAnswerText`): the `content`,
 * `refusal`, `reasoning_content` and `reasoning` strings and the tool calls' `arguments` of every
 * choice, as characters.
 */
function answerUsage(request: ChatRequest, choices: readonly CompletionChoice[]): Usage {
  let chars = 0;
  let reasoningChars = 0;
  for (const { message } of choices) {
    const reasoning = textLength(message.reasoning_content) + textLength(message.reasoning);
    chars += textLength(message.content) + textLength(message.refusal) + reasoning;
    reasoningChars += reasoning;
    if (Array.isArray(message.tool_calls)) for (const call of message.tool_calls as unknown[]) chars += argumentsLength(call);
    chars += argumentsLength(message.function_call);
  }
  return estimatedUsage(request, chars, reasoningChars);
}

const textLength = (value: unknown): number => (typeof value === 'string' ? value.length : 0);
/** The length of a tool call's (or a legacy `function_call`'s) `arguments` string. */
const argumentsLength = (call: unknown): number => (isPlainObject(call) ? textLength(isPlainObject(call.function) ? call.function.arguments : call.arguments) : 0);

/** The model that serves the request, after the enable_thinking rule. */
export function chooseModel(registry: ChatDeps['registry'], input: ChatRequest): { model: ResolvedModel; disableThinking: boolean } {
  const model = registry.resolve(input.model);
  if (!model) throw modelNotFound(input.model, 'model');
  const reasoning = model.catalog.supports_reasoning || model.candidates.some((c) => c.pm.supports_reasoning);
  if (input.deep_research && !reasoning) {
    throw badRequest(`The model '${input.model}' does not support deep_research (it needs a reasoning model)`, 'deep_research');
  }
  if (input.enable_thinking === false && reasoning) {
    const instructId = model.candidates.find((c) => c.pm.instruct_model_public_id)?.pm.instruct_model_public_id;
    const instruct = instructId ? registry.resolve(instructId) : undefined;
    if (instruct) return { model: instruct, disableThinking: false };
    return { model, disableThinking: true };
  }
  return { model, disableThinking: false };
}

/**
 * The upstream body for each provider model of the plan, built before the first attempt. A body
 * that cannot be built (e.g. JSON nested so deep that serialising it overflows the stack) is the
 * request's fault: 400, and no provider is contacted or marked.
 */
function buildBodies(attempts: Attempt[], effective: ChatRequest, disableThinking: boolean, received: ChatInput): Map<string, string | Buffer> {
  const bodies = new Map<string, string | Buffer>();
  try {
    for (const { candidate } of attempts) {
      const key = candidate.pm.provider_original_model_id;
      if (bodies.has(key)) continue;
      const body = upstreamBody(effective, { upstreamModel: key, disableThinking });
      bodies.set(key, encodeWithRawMembers(body, received.request, FORWARDED_MEMBERS, received.rawMembers));
    }
  } catch (error) {
    throw new ApiError(400, 'The request could not be encoded for the model provider (is a value nested too deeply?)', { code: 'invalid_request_body', cause: error });
  }
  return bodies;
}

/**
 * `cancellation`: aborted when the client leaves (reason `ClientClosed`); this function aborts it
 * itself at the deadline for one completion (an ApiError 504), so one signal carries both reasons.
 */
export async function completeChat(deps: ChatDeps, principal: Principal, input: ChatInput, cancellation: Cancellation): Promise<ChatResult> {
  const signal = cancellation.signal;
  const startedAt = input.startedAt ?? performance.now();
  const request = input.request;
  const { model, disableThinking } = chooseModel(deps.registry, request);
  // A conversation lends its history whenever it is given; only `store: true` writes to it.
  const session = deps.conversations && (request.store || request.conversation) ? await deps.conversations.prepare(request, principal, model) : null;
  const persist = session !== null && request.store === true;
  // A platform service's request in a project (no conversation): the project as a conversation of it lends it.
  const project = session === null && input.projectId !== undefined && deps.conversations?.project ? await deps.conversations.project(input.projectId, principal) : null;
  const projectId = session ? session.projectId : (project?.projectId ?? null);
  const lent = session ? session.messages : project?.system ? [project.system, ...request.messages] : request.messages;
  if (request.deep_research) {
    if (!deps.research) throw new ApiError(503, 'Deep research is not available on this server', { code: 'service_unavailable', param: 'deep_research' });
    if (persist) await session.stage();
    // The steps are made in the project (response-api passes it on), so llm-api gives each of them
    // the instruction: lending it here too would send it twice.
    const instruction = session ? session.projectSystem : project?.system;
    return deepResearch(deps.research, principal, {
      request,
      messages: instruction && lent[0] === instruction ? lent.slice(1) : lent,
      projectId,
      requestId: input.requestId,
      conversation: session?.conversation,
      finish: persist ? (answer) => storeAnswer(deps, session, answer, input.requestId) : undefined,
    }, signal);
  }
  let messages = lent;
  for (const step of deps.messageSteps ?? []) {
    const stepped = step(principal, messages, signal);
    messages = isPending(stepped) ? await stepped : stepped;
  }
  const effective: ChatRequest = messages === request.messages ? request : { ...request, messages };

  // Prompt text reaches a log only when the operator turned LOG_PROMPTS on (docs/operations.md warns).
  deps.promptLog?.info({ request_id: input.requestId, model: model.publicId, messages }, 'chat prompt');

  const attempts = deps.dispatcher.plan(model);
  const bodies = buildBodies(attempts, effective, disableThinking, input);

  // Budgets and allow-lists refuse here, before anything goes upstream (and before timers start).
  let ticket = deps.admission ? deps.admission.admit(principal, request.model, model.publicId) : null;
  if (isPending(ticket)) ticket = await ticket; // a budget to reserve, or limits not cached
  if (persist) await stageOrRelease(session, ticket);

  // One signal for the upstream: the client leaving, or the overall deadline, each with its reason
  // (the first to happen wins). The deadline aborts the request's own signal rather than a second
  // controller joined to it.
  const timer = setTimeout(() => cancellation.abort(new ApiError(504, 'The model provider took longer than the time limit for one completion')), deps.limits.maxDurationMs);
  timer.unref?.();
  const cleanup = () => clearTimeout(timer);

  const meter = deps.usage.open({
    ticket,
    requestId: input.requestId,
    userId: principal.userId,
    authMethod: principal.authMethod,
    apiKeyId: principal.apiKeyId ?? null,
    model: model.publicId,
    stream: Boolean(request.stream),
    metadata: request.metadata ?? null,
    projectId,
    startedAt,
  });
  const dispatchRequest = { bodies, requestId: input.requestId, signal };
  let answered: ChatCompletion['usage'] | null = null;
  let estimated = false;

  try {
    if (request.stream) {
      const dispatched = await deps.dispatcher.stream(attempts, dispatchRequest);
      meter.routed({ pm: dispatched.attempt.candidate.pm, endpoint: dispatched.attempt.endpoint.url, tries: dispatched.tries });
      meter.firstByte();
      const relay = relayStream({
        firstChunk: dispatched.value.firstChunk,
        rest: dispatched.value.rest,
        clientWantsUsage: request.stream_options?.include_usage === true,
        // A provider that ignores stream_options sends no usage: the client still gets the estimate that is recorded.
        usageFallback:
          request.stream_options?.include_usage === true
            ? { usage: (outcome) => streamUsage(effective, outcome), model: dispatched.attempt.candidate.pm.model_public_id, created: unixSeconds(deps.clock) }
            : undefined,
        collect: persist,
        requestId: input.requestId,
        firstChunkExtra: session ? { conversation: session.conversation } : undefined,
        maxEventBytes: deps.limits.maxEventBytes,
        signal,
        onUpstreamError: (detail, kind) => deps.dispatcher.logStreamFailure(dispatched.attempt, input.requestId, detail, kind),
        usageLog: deps.logger,
        // Stored before the stream's last event ([DONE] waits for it); see StreamRelay.
        save: persist ? (outcome, complete) => storeStreamed(deps, session, outcome, complete, dispatched.attempt.candidate.pm.model_public_id, input.requestId) : undefined,
      });
      const done = relay.done.then(async (outcome) => {
        cleanup();
        const status = outcome.outcome === 'ok' ? 200 : outcome.outcome === 'client_closed' ? 499 : outcome.outcome === 'deadline' ? 504 : 502;
        // Without the provider's report the budget counters take the estimate too (see streamUsage).
        await meter.close({ status, outcome: outcome.outcome, usage: streamUsage(effective, outcome), estimated: outcome.usage === null });
        return outcome;
      });
      // The same counts as the usage record (both callbacks estimate only when the provider reported none).
      const report = relay.done.then((outcome) => usageReport(model.publicId, dispatched.attempt.candidate.pm.provider_id, streamUsage(effective, outcome)));
      return { kind: 'stream', events: relay.events, done, report };
    }

    const dispatched = await deps.dispatcher.json(attempts, dispatchRequest);
    meter.routed({ pm: dispatched.attempt.candidate.pm, endpoint: dispatched.attempt.endpoint.url, tries: dispatched.tries });
    meter.firstByte();
    const body = await readAnswer(dispatched.value, deps.limits.maxResponseBytes, signal);
    // The provider counted these tokens whatever happens next (a malformed answer, a failed store).
    if (isPlainObject(body.usage)) answered = body.usage;
    const served = dispatched.attempt.candidate.pm.model_public_id;
    normalizeCompletion(body, served, unixSeconds(deps.clock), deps.logger, input.requestId);
    // An answer without usage (OpenAI always sends it; some providers do not) is recorded and
    // charged with the estimate, as a stream without the report is; the client's body stays as it came.
    if (!body.usage) {
      answered = answerUsage(effective, body.choices);
      estimated = true;
    }
    if (persist) {
      const message = body.choices[0]?.message;
      await storeAnswer(deps, session, {
        content: typeof message?.content === 'string' ? message.content : '',
        reasoning: request.store_reasoning ? String(message?.reasoning_content ?? message?.reasoning ?? '') : '',
        toolCalls: toolCallsOf(message),
        status: 'completed',
        model: served,
        usage: body.usage ?? null,
      }, input.requestId);
    }
    if (session) body.conversation = session.conversation;
    const closed = meter.close({ status: 200, outcome: 'ok', usage: answered, estimated });
    if (isPending(closed)) await closed; // the budget counters take the real cost (or the estimate)
    cleanup();
    return { kind: 'json', body, report: usageReport(model.publicId, dispatched.attempt.candidate.pm.provider_id, answered) };
  } catch (error) {
    cleanup();
    closeOnError(meter, error, answered, estimated);
    throw error;
  }
}

/**
 * `store: true`: readies the input for storing once the request is admitted; a refusal there (a 4xx
 * from media-api for an inline image) gives the budget reserved for the request back.
 */
async function stageOrRelease(session: ConversationSession, ticket: { settle(spent: { cost: number; tokens: number }): Promise<void> } | null): Promise<void> {
  try {
    await session.stage();
  } catch (error) {
    await ticket?.settle({ cost: 0, tokens: 0 }).catch(() => {});
    throw error;
  }
}

/** Stores the exchange; a failure is logged here and thrown on (the request, or its stream, fails with it). */
async function storeAnswer(deps: ChatDeps, session: ConversationSession, answer: StoredAnswer, requestId: string): Promise<void> {
  try {
    await session.finish(answer);
  } catch (error) {
    deps.logger.error({ err: (error as Error).message, request_id: requestId }, 'could not store the answer in the conversation');
    throw error;
  }
}

/**
 * A streamed exchange, stored before the stream ends. One that produced nothing (the provider
 * failed, or the client left, before any text or tool call arrived) is not stored at all.
 */
function storeStreamed(deps: ChatDeps, session: ConversationSession, outcome: StreamOutcome, complete: boolean, model: string, requestId: string): Promise<void> {
  if (!complete && outcome.content === '' && outcome.reasoning === '' && outcome.toolCalls === null) return Promise.resolve();
  const answer: StoredAnswer = {
    content: outcome.content,
    reasoning: outcome.reasoning,
    toolCalls: outcome.toolCalls,
    status: complete ? 'completed' : 'incomplete',
    model,
    usage: outcome.usage,
  };
  return storeAnswer(deps, session, answer, requestId);
}

/** The tool calls of a JSON answer's message (those with an id and a function's or custom tool's name), or null. */
function toolCallsOf(message: AssistantMessage | undefined): AnswerToolCall[] | null {
  const calls = message?.tool_calls;
  if (!Array.isArray(calls) || calls.length === 0) return null;
  const out: AnswerToolCall[] = [];
  for (const call of calls as Array<{ id?: unknown; type?: unknown; function?: { name?: unknown; arguments?: unknown }; custom?: { name?: unknown; input?: unknown } }>) {
    if (typeof call?.id !== 'string') continue;
    const custom = call.custom;
    if (call.type === 'custom' && typeof custom?.name === 'string') {
      out.push({ id: call.id, name: custom.name, arguments: typeof custom.input === 'string' ? custom.input : '', custom: true });
      continue;
    }
    const fn = call.function;
    if (typeof fn?.name !== 'string') continue;
    out.push({ id: call.id, name: fn.name, arguments: typeof fn.arguments === 'string' ? fn.arguments : '{}' });
  }
  return out;
}

/**
 * Records a failed request, with the usage of the answer when it had come before the failure (the
 * provider's report, or the estimate when `estimated`).
 */
function closeOnError(meter: UsageMeter, error: unknown, usage: ChatCompletion['usage'] | null, estimated: boolean): void {
  if (error instanceof ClientClosed) {
    void meter.close({ status: 499, outcome: 'client_closed', usage, estimated });
    return;
  }
  const status = error instanceof ApiError ? error.status : 500;
  void meter.close({ status, outcome: status === 429 ? 'rate_limited' : 'upstream_error', usage, estimated });
}

/** The non-stream answer, read up to the limit (a larger one is cut: 502) and parsed. */
async function readAnswer(res: UpstreamResponse, max: number, signal: CancelSignal): Promise<ChatCompletion> {
  let text: string;
  try {
    const read = await res.readAll(max);
    if (read.truncated) throw new ApiError(502, `The model provider's answer is larger than the limit of ${max} bytes`, { code: 'upstream_response_too_large' });
    text = decodeUtf8(read.bytes);
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    if (error instanceof ApiError) throw error;
    throw new ApiError(502, 'The model provider failed while sending its answer', { cause: error });
  }
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as ChatCompletion;
  } catch (error) {
    throw new ApiError(502, 'The model provider answered with a malformed body', { cause: error });
  }
}
