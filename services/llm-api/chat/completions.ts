import type { Request, Response } from 'express';
import { ApiError, badRequest, notFound, type Principal } from '../../kit/index.js';
import type { Candidate, ResolvedModel } from '../models/registry.js';
import type { LlmCore } from '../routing/core.js';
import { costMicroUsd, type UsageRecord } from '../usage/recorder.js';
import { ClientClosed, dispatch, dispatchStream, planAttempts, type Dispatched } from './dispatch.js';
import { normalizeCompletion } from './normalize.js';
import { upstreamBody, type ChatRequest } from './schemas.js';
import { relayStream, type Usage } from './stream.js';

/**
 * POST /v1/chat/completions: resolve the model from memory, choose the served model
 * (`enable_thinking: false` → the instruct model), dispatch with failover, then answer as JSON or
 * relay the SSE stream; record usage off the request path in every case.
 */

export interface StoreHooks {
  /** Runs before dispatch when `store` is set: returns the history to prepend and the stream extra. */
  prepare(input: ChatRequest, principal: Principal, model: ResolvedModel): Promise<StoreSession | null>;
}

export interface StoreSession {
  messages: ChatRequest['messages'];
  conversation: { id: string; title: string | null };
  /** Persists the latest input message and the assistant answer. */
  finish(answer: { content: string; reasoning: string; status: 'completed' | 'incomplete'; model: string; usage: Usage | null }): Promise<void>;
}

const modelNotFound = (id: string) => notFound(`The model '${id}' does not exist or you do not have access to it.`, 'model_not_found');

/** The model that serves the request, after the enable_thinking rule (SPEC.md 2.7, 4.2). */
export function chooseModel(core: LlmCore, input: ChatRequest): { model: ResolvedModel; disableThinking: boolean } {
  const model = core.registry.resolve(input.model);
  if (!model) throw modelNotFound(input.model);
  const reasoning = model.catalog.supports_reasoning || model.candidates.some((c) => c.pm.supports_reasoning);
  if (input.deep_research && !reasoning) {
    throw badRequest(`The model '${input.model}' does not support deep_research (it needs a reasoning model)`, 'deep_research');
  }
  if (input.enable_thinking === false && reasoning) {
    const instructId = model.candidates.find((c) => c.pm.instruct_model_public_id)?.pm.instruct_model_public_id;
    const instruct = instructId ? core.registry.resolve(instructId) : undefined;
    if (instruct) return { model: instruct, disableThinking: false };
    return { model, disableThinking: true };
  }
  return { model, disableThinking: false };
}

export async function createChatCompletion(core: LlmCore, req: Request, res: Response, input: ChatRequest, hooks?: StoreHooks): Promise<void> {
  const started = performance.now();
  const principal = req.principal!;
  const { model, disableThinking } = chooseModel(core, input);
  // A conversation lends its history whenever it is given; only `store: true` writes to it.
  const session = hooks && (input.store || input.conversation) ? await hooks.prepare(input, principal, model) : null;
  const persist = session !== null && input.store === true;
  const effective: ChatRequest = session ? { ...input, messages: session.messages } : input;

  const bodies = new Map<string, string>();
  const bodyFor = (candidate: Candidate) => {
    const key = candidate.pm.provider_original_model_id;
    let body = bodies.get(key);
    if (!body) bodies.set(key, (body = JSON.stringify(upstreamBody(effective, { upstreamModel: key, disableThinking }))));
    return body;
  };

  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);

  const record = (partial: Partial<UsageRecord> & { status: number; outcome: string }, dispatched?: Dispatched, usage?: Usage | null) => {
    const pm = dispatched?.attempt.candidate.pm;
    const prompt = usage?.prompt_tokens ?? 0;
    const completion = usage?.completion_tokens ?? 0;
    core.usage.record({
      request_id: req.requestId,
      user_id: principal.userId,
      auth_method: principal.authMethod,
      api_key_id: principal.apiKeyId ?? null,
      model: model.publicId,
      provider_id: pm?.provider_id ?? null,
      provider_model_id: pm?.id ?? null,
      endpoint: dispatched?.attempt.endpoint.url ?? null,
      stream: Boolean(input.stream),
      prompt_tokens: prompt,
      completion_tokens: completion,
      reasoning_tokens: usage?.completion_tokens_details?.reasoning_tokens ?? 0,
      total_tokens: prompt + completion,
      cost_micro_usd: pm ? costMicroUsd(pm.pricing.lines ?? [], { prompt, completion }) : 0,
      latency_ms: Math.round(performance.now() - started),
      ttfb_ms: null,
      attempts: dispatched?.tries ?? 0,
      metadata: input.metadata ?? null,
      created_at: new Date(core.ctx.runtime.clock.now()),
      ...partial,
    });
  };

  const plan = planAttempts(core, model);
  const options = { signal: controller.signal, requestId: req.requestId };
  let dispatched: Dispatched;
  let firstChunk: Buffer | undefined;
  let rest: AsyncIterator<unknown> | undefined;
  try {
    if (!input.stream) dispatched = await dispatch(core, plan, bodyFor, options);
    else ({ dispatched, firstChunk, rest } = await dispatchStream(core, plan, bodyFor, options));
  } catch (error) {
    if (error instanceof ClientClosed) {
      record({ status: 499, outcome: 'client_closed' });
      return;
    }
    const status = error instanceof ApiError ? error.status : 500;
    record({ status, outcome: status === 429 ? 'rate_limited' : 'upstream_error' });
    throw error;
  }
  const ttfb = Math.round(performance.now() - started);

  if (input.stream) {
    const outcome = await relayStream({
      res,
      firstChunk: firstChunk!,
      rest: rest!,
      clientWantsUsage: input.stream_options?.include_usage === true,
      keepAliveMs: core.ctx.runtime.config.LLM_SSE_KEEPALIVE_MS,
      collect: persist,
      requestId: req.requestId,
      firstChunkExtra: session ? { conversation: session.conversation } : undefined,
      now: () => Date.now(),
    });
    res.off('close', onClose);
    const status = outcome.outcome === 'ok' ? 200 : outcome.outcome === 'client_closed' ? 499 : 502;
    record({ status, outcome: outcome.outcome, ttfb_ms: ttfb }, dispatched, outcome.usage);
    if (persist) {
      await session!
        .finish({
          content: outcome.content,
          reasoning: outcome.reasoning,
          status: outcome.outcome === 'ok' ? 'completed' : 'incomplete',
          model: dispatched.attempt.candidate.pm.model_public_id,
          usage: outcome.usage,
        })
        .catch((error) => core.ctx.runtime.logger.error({ err: (error as Error).message, request_id: req.requestId }, 'could not store the streamed answer'));
    }
    return;
  }

  let body: Record<string, any>;
  try {
    body = JSON.parse(await dispatched.res.body.text());
  } catch (error) {
    if (controller.signal.aborted) {
      record({ status: 499, outcome: 'client_closed', ttfb_ms: ttfb }, dispatched);
      return;
    }
    record({ status: 502, outcome: 'upstream_error', ttfb_ms: ttfb }, dispatched);
    throw new ApiError(502, 'The model provider answered with a malformed body', { cause: error });
  } finally {
    res.off('close', onClose);
  }
  normalizeCompletion(body, dispatched.attempt.candidate.pm.model_public_id, Math.floor(core.ctx.runtime.clock.now() / 1000));
  if (session && persist) {
    const message = body.choices[0]?.message ?? {};
    await session.finish({
      content: typeof message.content === 'string' ? message.content : '',
      reasoning: input.store_reasoning ? String(message.reasoning_content ?? message.reasoning ?? '') : '',
      status: 'completed',
      model: dispatched.attempt.candidate.pm.model_public_id,
      usage: body.usage ?? null,
    });
  }
  if (session) body.conversation = session.conversation;
  record({ status: 200, outcome: 'ok', ttfb_ms: ttfb }, dispatched, body.usage ?? null);
  res.json(body);
}
