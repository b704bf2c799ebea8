import type { Clock, Logger } from '../../kit/index.js';
import type { ModelRegistry } from '../models/registry.js';
import type { LlmApiResource } from '../resource.js';
import type { HealthTracker } from '../routing/failover.js';
import type { Random } from '../routing/select.js';
import type { Upstream } from '../routing/upstream.js';
import { createUsageMeters } from '../usage/meter.js';
import { usageEstimated, usageRawKeyOnly, usageTables } from '../usage/migrations.js';
import type { UsageRecorder } from '../usage/recorder.js';
import type { ChatDeps, ConversationSessions, MessageStep } from './completions.js';
import type { ChatLimits } from './config.js';
import { createDispatcher } from './dispatch.js';
import { routes } from './routes.js';
import { chatRequestSchema } from './schemas.js';

export { routes as chatRoutes, defaultChatRouteSettings, type ChatRouteSettings } from './routes.js';
export { chatConfigShape, loadChatLimits } from './config.js';
export { createStoreHooks } from './store-hooks.js';
export type { ChatDeps, MessageStep } from './completions.js';
export { createResearchPort } from './research-port.js';

/** Request fields an upstream 400's `param` may name (anything else is dropped). */
const knownFields: ReadonlySet<string> = new Set(Object.keys(chatRequestSchema.shape));

/** The chat path's narrow dependencies, from the pieces the service builds once. */
export function buildChatDeps(parts: {
  registry: Pick<ModelRegistry, 'resolve'>;
  upstream: Pick<Upstream, 'postJson'>;
  health: HealthTracker;
  random: Random;
  recorder: Pick<UsageRecorder, 'record'>;
  logger: Logger;
  clock: Clock;
  limits: ChatLimits;
  conversations?: ConversationSessions;
  messageSteps?: MessageStep[];
  admission?: ChatDeps['admission'];
  research?: ChatDeps['research'];
  /** `LOG_PROMPTS`: log each request's messages (off by default). */
  logPrompts?: boolean;
}): ChatDeps {
  return {
    registry: parts.registry,
    dispatcher: createDispatcher({
      upstream: parts.upstream,
      health: parts.health,
      random: parts.random,
      logger: parts.logger,
      errorBodyMaxBytes: parts.limits.errorBodyMaxBytes,
      knownFields,
    }),
    usage: createUsageMeters({ recorder: parts.recorder, clock: parts.clock }),
    admission: parts.admission,
    conversations: parts.conversations,
    clock: parts.clock,
    limits: parts.limits,
    messageSteps: parts.messageSteps ?? [],
    research: parts.research,
    logger: parts.logger,
    promptLog: parts.logPrompts ? parts.logger : undefined,
  };
}

/** Chat completions (OpenAI-compatible, SSE streaming) and usage accounting. */
export const chatResource: LlmApiResource = {
  name: 'chat',
  migrations: [usageTables, usageRawKeyOnly, usageEstimated],
  start: (deps) => deps.catalog.start(),
  routes: (deps) => routes(deps.chat, deps.chatSettings),
};
