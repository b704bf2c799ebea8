import { existsSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
import type { ServiceDefinition } from '../kit/service.js';
import { deckVariables } from './deck-vars.js';
import { loadDeck } from './deck.js';
import { createEdge } from './edge.js';

/** A relative EDGE_DECK_FILE: from the working directory, else from the repository root (npm start elsewhere). */
function deckPath(file: string): string {
  if (isAbsolute(file) || existsSync(resolve(file))) return resolve(file);
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, file);
}

/**
 * The embedded edge (`npm start`, tests): reads deck/kong.yaml — the file Kong is configured
 * from — and runs the same plugin cores. Started after the services, so ctx.urls holds their
 * real ports. Listens on GATEWAY_PORT (8000).
 */
export const gatewayService: ServiceDefinition = {
  name: 'gateway',
  port: (config) => config.GATEWAY_PORT,
  migrations: [],
  async createApp(ctx) {
    const config = ctx.runtime.config;
    const deck = loadDeck(deckPath(config.EDGE_DECK_FILE), deckVariables(config, ctx.urls, ctx.gatewaySecret));
    const edge = await createEdge({
      deck,
      deps: { clock: ctx.runtime.clock, logger: ctx.runtime.logger, revocations: ctx.runtime.revocations },
      trustedProxies: config.TRUSTED_PROXIES,
      connectTimeoutMs: config.EDGE_UPSTREAM_CONNECT_TIMEOUT_MS,
      readTimeoutMs: config.EDGE_UPSTREAM_READ_TIMEOUT_MS,
      accessLog: (entry) => (entry.status >= 500 ? ctx.runtime.logger.error(entry, 'edge request') : ctx.runtime.logger.info(entry, 'edge request')),
    });
    ctx.onStop(() => edge.close());
    ctx.runtime.logger.info({ routes: edge.router.size }, 'gateway: decK configuration loaded');
    const app = express();
    app.disable('x-powered-by');
    app.disable('etag');
    app.use((req, res) => edge.handle(req, res));
    return app;
  },
};
