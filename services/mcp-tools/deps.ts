import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { Registry } from 'prom-client';
import { createEgressGuard, parseSize, type ServiceContext } from '../kit/index.js';
import { createToolSettingsStore } from './admin/store.js';
import { createToolSwitchboard } from './admin/tool-switches.js';
import { loadMcpConfig, longestToolCallMs, type McpConfig } from './config.js';
import { createEmbedder } from './file-search/embeddings.js';
import { createFileSearch } from './file-search/file-search.js';
import { createFileSearchStore } from './file-search/store.js';
import { createSandbox } from './sandbox/index.js';
import { createSearchBackend } from './search/index.js';
import { createCancelRelay } from './tools/cancel-relay.js';
import { createToolCaller } from './tools/call-tool.js';
import { createCatalog } from './tools/catalog.js';
import { buildTools } from './tools/index.js';
import { createToolMetrics } from './tools/metrics.js';

/**
 * The composition root of mcp-tools: everything the routes need, built once from the service's
 * config and the kit's runtime. Whatever starts work (switch refresh, sandbox) stops with the app.
 */
export async function buildMcpDeps(ctx: ServiceContext, overrides: Partial<McpConfig> = {}) {
  const { runtime } = ctx;
  const config: McpConfig = { ...loadMcpConfig(runtime.config.env), ...overrides };
  const logger = runtime.logger;
  const knex = runtime.db.knex;

  const sandbox = await createSandbox(config, logger);
  ctx.onStop(() => sandbox.close?.());
  const fileSearch = createFileSearch({
    store: createFileSearchStore(knex),
    embedder: config.EMBEDDINGS_URL
      ? createEmbedder({ url: config.EMBEDDINGS_URL, model: config.EMBEDDINGS_MODEL, apiKey: config.EMBEDDINGS_API_KEY, timeoutMs: config.EMBEDDINGS_TIMEOUT_MS })
      : null,
    logger,
    chunkChars: config.FILE_SEARCH_CHUNK_CHARS,
    chunkOverlap: Math.min(config.FILE_SEARCH_CHUNK_OVERLAP, Math.floor(config.FILE_SEARCH_CHUNK_CHARS / 2)),
    maxDocumentsPerUser: config.FILE_SEARCH_MAX_DOCUMENTS_PER_USER,
  });
  const catalog = createCatalog(
    buildTools({
      search: createSearchBackend(config),
      scrape: {
        egress: createEgressGuard({ allowHosts: runtime.config.EGRESS_ALLOW_HOSTS }),
        timeoutMs: config.SCRAPE_TIMEOUT_MS,
        maxBytes: parseSize(config.SCRAPE_MAX_BYTES),
        defaultMaxChars: config.SCRAPE_DEFAULT_MAX_CHARS,
      },
      fileSearch,
      fileSearchMaxChars: config.FILE_SEARCH_MAX_DOCUMENT_CHARS,
      sandbox,
    }),
  );

  const store = createToolSettingsStore(knex);
  const switches = createToolSwitchboard({ store, refreshMs: config.MCP_TOOL_STATE_REFRESH_MS, logger });
  await switches.start();
  ctx.onStop(() => switches.stop());

  const metricsRegistry = new Registry();
  // A cancel that reaches a replica not running the call is passed on over the bus (RabbitMQ),
  // surviving a broker outage for as long as the call it names can still be running.
  const cancelRelay = createCancelRelay({ bus: runtime.bus, logger, clock: runtime.clock, maxAgeMs: longestToolCallMs(config) });
  const callTool = createToolCaller({
    catalog,
    switches,
    metrics: createToolMetrics(metricsRegistry),
    logger,
    maxConcurrentCalls: config.MCP_MAX_CONCURRENT_CALLS,
    cancelElsewhere: cancelRelay?.publish,
    clock: runtime.clock,
    progressIntervalMs: config.MCP_PROGRESS_INTERVAL_MS,
  });
  if (cancelRelay) {
    // Optional: a replica that cannot take other replicas' cancels still serves (each call still ends at its timeout).
    await cancelRelay.listen(callTool.cancelHere).catch((error: Error) => logger.warn({ err: error.message }, 'cancels sent to other replicas will not reach this one'));
    ctx.onStop(() => cancelRelay.stop());
  }

  return {
    config,
    metricsRegistry,
    mcp: { catalog, switches, callTool, jsonSchemaValidator: new AjvJsonSchemaValidator(), bodyLimit: parseSize(config.MCP_BODY_LIMIT), jsonMaxDepth: runtime.config.JSON_MAX_DEPTH, logger },
    admin: { knex, store, switches, catalog, clock: runtime.clock },
  };
}
export type McpDeps = Awaited<ReturnType<typeof buildMcpDeps>>;
