import { resolve } from 'node:path';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { loadEdgeConfig } from '../../services/gateway/config.js';
import { deckVariables } from '../../services/gateway/deck-vars.js';
import { loadDeck } from '../../services/gateway/deck.js';

export const DECK_FILE = resolve('deck/kong.yaml');

/** The DECK_* variables of the embedded defaults, with the given overrides (upstreams, issuer…). */
export function deckVars(overrides: Record<string, string> = {}): Record<string, string> {
  const config = { ...loadBaseConfig({ NODE_ENV: 'test' }), ...loadEdgeConfig({}) };
  const urls = {
    llmApi: 'http://127.0.0.1:18080',
    responseApi: 'http://127.0.0.1:18082',
    mediaApi: 'http://127.0.0.1:18285',
    mcpTools: 'http://127.0.0.1:18091',
  };
  return { ...deckVariables(config, urls, 'x'.repeat(40), {}), ...overrides };
}

export const loadTestDeck = (overrides: Record<string, string> = {}) => loadDeck(DECK_FILE, deckVars(overrides));
