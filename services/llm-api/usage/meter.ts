import type { Clock, MaybePromise } from '../../kit/index.js';
import type { ProviderModelRow } from '../models/types.js';
import { costMicroUsd, type UsageRecord } from './recorder.js';
import { cleanUsage, tokenCount } from './token-counts.js';

/**
 * One usage meter per chat request: opened once when the request is about to be dispatched,
 * told which provider answered and when the first byte came, and closed exactly once with the
 * final status, outcome and token counts. Closing writes one usage record (to the recorder's
 * memory queue; the recorder writes batches off the request path). A second `close` is ignored,
 * so whichever path ends the request first decides its record.
 */
export interface UsageMeter {
  /** The attempt that answered and how many tries it took. */
  routed(info: { pm: ProviderModelRow; endpoint: string; tries: number }): void;
  firstByte(): void;
  /**
   * Settles when the request's budget counters hold its cost: a promise only when there are any.
   * `estimated`: the counts are the gateway's estimate, not the provider's report (a stream that
   * ended without one, a JSON answer without `usage`); recorded and charged the same way, and
   * marked `usage_estimated`.
   */
  close(result: CloseResult): MaybePromise<void>;
  readonly closed: boolean;
}

export interface CloseResult {
  status: number;
  outcome: string;
  usage?: MeteredUsage | null;
  estimated?: boolean;
  tries?: number;
}

export interface MeteredUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  /** `cached_tokens`: prompt tokens the provider served from its cache (priced at the cached rate when the model has one). */
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
  completion_tokens_details?: { reasoning_tokens?: number };
}

export interface MeterRequest {
  requestId: string;
  userId: string;
  authMethod: string | null;
  apiKeyId: string | null;
  model: string;
  stream: boolean;
  metadata: Record<string, string> | null;
  /** The project the request is made for: its conversation's project (null without one). */
  projectId?: string | null;
  /** `performance.now()` when the request arrived (latency counts from there). */
  startedAt: number;
  /**
   * Budget counters the request was admitted against; settled on close with the cost recorded (the
   * estimate's, when estimated). `at`: the instant it was admitted at, which chose the budget periods.
   */
  ticket?: { settle(spent: { cost: number; tokens: number }): Promise<void>; readonly at?: number } | null;
}

export interface UsageMeters {
  open(request: MeterRequest): UsageMeter;
}

export function createUsageMeters(deps: { recorder: { record(entry: UsageRecord): void }; clock: Clock; elapsed?: () => number }): UsageMeters {
  const env: MeterEnv = { recorder: deps.recorder, clock: deps.clock, elapsed: deps.elapsed ?? (() => performance.now()) };
  return { open: (request) => new Meter(env, request) };
}

interface MeterEnv {
  recorder: { record(entry: UsageRecord): void };
  clock: Clock;
  elapsed: () => number;
}

/**
 * A class rather than an object of closures: a meter lives as long as its request, and an object
 * literal with a getter and three closures over its state is several objects (one in dictionary
 * mode) for the collector to copy while the request waits on its provider.
 */
class Meter implements UsageMeter {
  private done = false;
  private route: { pm: ProviderModelRow; endpoint: string; tries: number } | null = null;
  private ttfb: number | null = null;
  /**
   * The record's `created_at`, which the daily rollup buckets by: the request's start, the instant
   * its budgets charged it at when it has any. Its end would put a request crossing midnight (UTC)
   * on the day after the one its budget counted it on.
   */
  private readonly at: number;

  constructor(
    private readonly env: MeterEnv,
    private readonly request: MeterRequest,
  ) {
    this.at = request.ticket?.at ?? env.clock.now();
  }

  get closed(): boolean {
    return this.done;
  }

  routed(info: { pm: ProviderModelRow; endpoint: string; tries: number }): void {
    this.route = info;
  }

  firstByte(): void {
    this.ttfb ??= Math.round(this.env.elapsed() - this.request.startedAt);
  }

  close(result: CloseResult): MaybePromise<void> {
    if (this.done) return;
    this.done = true;
    const request = this.request;
    const routed = this.route;
    // Cleaned again, on a copy (a no-op for what the chat paths already cleaned and reported):
    // whatever a caller passes, the record holds integers its columns take, the total their sum.
    const given = result.usage;
    const details = given?.completion_tokens_details;
    const copy = given && { prompt_tokens: given.prompt_tokens, completion_tokens: given.completion_tokens, completion_tokens_details: details && { reasoning_tokens: details.reasoning_tokens } };
    const usage = copy ? cleanUsage(copy) : null;
    const prompt = usage?.prompt_tokens ?? 0;
    const completion = usage?.completion_tokens ?? 0;
    const pm = routed?.pm;
    // A failed request costs nothing unless usage came with it (the provider's or the estimate): its
    // `per_request` line is not charged for an answer that never came.
    const priced = pm && (usage !== null || result.status < 400);
    // Part of the prompt count: a provider's larger figure counts as the whole prompt.
    const cached = Math.min(tokenCount(given?.prompt_tokens_details?.cached_tokens) ?? 0, prompt);
    const cost = priced ? costMicroUsd(pm.pricing.lines ?? [], { prompt, completion, cached }) : 0;
    this.env.recorder.record({
      request_id: request.requestId,
      user_id: request.userId,
      auth_method: request.authMethod,
      api_key_id: request.apiKeyId,
      model: request.model,
      provider_id: pm?.provider_id ?? null,
      provider_model_id: pm?.id ?? null,
      endpoint: routed?.endpoint ?? null,
      stream: request.stream,
      prompt_tokens: prompt,
      cached_tokens: cached,
      completion_tokens: completion,
      reasoning_tokens: usage?.completion_tokens_details?.reasoning_tokens ?? 0,
      total_tokens: prompt + completion,
      cost_micro_usd: cost,
      usage_estimated: result.estimated === true,
      latency_ms: Math.round(this.env.elapsed() - request.startedAt),
      ttfb_ms: this.ttfb,
      attempts: routed?.tries ?? result.tries ?? 0,
      status: result.status,
      outcome: result.outcome,
      metadata: request.metadata,
      project_id: request.projectId ?? null,
      created_at: new Date(this.at),
    });
    if (request.ticket) return request.ticket.settle({ cost, tokens: prompt + completion });
  }
}
