import { loadConfig, type ServiceContext } from '../kit/index.js';
import { responsesConfigShape, type ResponsesConfig } from './config.js';
import { createLlmPort, createMediaPort, createToolsPort, type LlmPort, type MediaPort, type ToolsPort } from './responses/ports.js';
import { createResponseEventLog, EVENTS_KEPT_MS } from './responses/event-log.js';
import { startRetentionPurge } from './responses/purge.js';
import { longestLoopMs, ProcessStoppingError } from './responses/loop.js';
import type { ResponsesDeps } from './responses/responses.js';
import { createResponseStore } from './responses/store.js';

/**
 * The composition root of response-api: settings parsed once, the clients of llm-api and
 * mcp-tools, the store, the writer of background responses' events and the retention purge, per app instance. On stop, loops still running in
 * this process are stopped and stored `failed` with the error a crash leaves (purge.ts), never
 * `cancelled`, which only a cancel stores (a background response never stays "in_progress").
 */
export function buildResponsesDeps(ctx: ServiceContext, overrides: { llm?: LlmPort; tools?: ToolsPort; media?: MediaPort } = {}) {
  const { runtime } = ctx;
  const config: ResponsesConfig = loadConfig(responsesConfigShape, runtime.config.env);
  const store = createResponseStore(runtime.db.knex);
  const llm =
    overrides.llm ??
    createLlmPort({
      baseUrl: () => ctx.urls.llmApi,
      gatewayToken: ctx.gatewaySecret,
      timeoutMs: config.RESPONSES_STEP_TIMEOUT_MS,
      clock: runtime.clock,
      modelCacheMs: config.RESPONSES_MODEL_CACHE_MS,
    });
  const tools =
    overrides.tools ??
    createToolsPort({
      baseUrl: () => ctx.urls.mcpTools,
      gatewayToken: ctx.gatewaySecret,
      clock: runtime.clock,
      listCacheMs: config.RESPONSES_TOOLS_CACHE_MS,
    });
  const media = overrides.media ?? createMediaPort({ baseUrl: () => ctx.urls.mediaApi, gatewayToken: ctx.gatewaySecret, timeoutMs: runtime.config.INTERNAL_HTTP_TIMEOUT_MS });
  const running: ResponsesDeps['running'] = new Map();
  // Each purge pass also ends the responses a crashed process left running (none can run longer).
  const interruptedAfterMs = longestLoopMs({ stepTimeoutMs: config.RESPONSES_STEP_TIMEOUT_MS, toolTimeoutMs: config.RESPONSES_TOOL_TIMEOUT_MS });
  const purge = startRetentionPurge({ store, clock: runtime.clock, logger: runtime.logger, intervalMs: config.RESPONSES_PURGE_INTERVAL_MS, interruptedAfterMs, eventsKeptMs: EVENTS_KEPT_MS });
  const events = createResponseEventLog({ store, clock: runtime.clock, logger: runtime.logger });
  const responses: ResponsesDeps & { cancelWaitMs: number; keepAliveMs: number } = {
    store,
    llm,
    tools,
    media,
    clock: runtime.clock,
    logger: runtime.logger,
    retentionDays: config.RESPONSES_RETENTION_DAYS,
    cancelPollMs: config.RESPONSES_CANCEL_POLL_MS,
    toolTimeoutMs: config.RESPONSES_TOOL_TIMEOUT_MS,
    stepTimeoutMs: config.RESPONSES_STEP_TIMEOUT_MS,
    maxBackgroundPerUser: config.RESPONSES_MAX_BACKGROUND_PER_USER,
    cancelWaitMs: 10_000,
    keepAliveMs: config.RESPONSES_SSE_KEEPALIVE_MS,
    running,
    events,
  };
  ctx.onStop(async () => {
    await purge.stop();
    const loops = [...running.values()];
    for (const loop of loops) loop.abort.abort(new ProcessStoppingError());
    await Promise.allSettled(loops.map((loop) => loop.done));
    // After the loops: their terminal events are the last to write.
    await events.stop();
    if ('close' in llm && typeof llm.close === 'function') await llm.close();
    if ('close' in media && typeof media.close === 'function') await media.close();
  });
  return { config, responses, purge };
}
export type ResponseApiDeps = ReturnType<typeof buildResponsesDeps>;
