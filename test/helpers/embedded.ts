import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, loadBaseConfig, newId } from '../../services/kit/index.js';
import { startPlatform, type Platform } from '../../services/platform/platform.js';

/**
 * The platform on the embedded defaults of `npm start` (PGlite under a fresh data directory and
 * the PostgreSQL-backed queue: no DATABASE_URL, no AMQP_URL), every service on a free port, with
 * fast pollers, plus an admin user and a caller that speaks to llm-api as the edge would.
 */
export interface EmbeddedPlatform {
  platform: Platform;
  adminId: string;
  /** JSON request to llm-api as the admin, through the gateway-token door. */
  adminCall(method: string, path: string, body?: unknown): Promise<Response>;
  stop(): Promise<void>;
}

export async function startEmbeddedPlatform(env: Record<string, string> = {}): Promise<EmbeddedPlatform> {
  const dataDir = await mkdtemp(join(tmpdir(), 'platform-embedded-'));
  const secret = 'e'.repeat(40);
  const config = loadBaseConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    GATEWAY_SHARED_SECRET: secret,
    GATEWAY_PORT: '0',
    LLM_API_PORT: '0',
    RESPONSE_API_PORT: '0',
    MEDIA_API_PORT: '0',
    MCP_TOOLS_PORT: '0',
    BUS_POLL_MS: '20',
    OUTBOX_POLL_MS: '20',
    // The idle backoff stays on (it is the default), bounded to keep retries found soon after a test's clock moves.
    EMBEDDED_IDLE_POLL_MAX_MS: '160',
    PROVIDER_URL_ALLOW: '127.0.0.1',
    ...env,
  });
  const platform = await startPlatform(config);
  const adminId = newId('user');
  await platform.ctx.runtime.db.knex('users').insert({ id: adminId, subject: adminId, email: 'admin@example.test', username: 'admin', is_admin: true });
  const base = `http://127.0.0.1:${platform.port('llm-api')}`;
  return {
    platform,
    adminId,
    adminCall: (method, path, body) =>
      fetch(base + path, {
        method,
        headers: { [GATEWAY_TOKEN_HEADER]: secret, [IDENTITY_HEADERS.authMethod]: 'jwt', [IDENTITY_HEADERS.userId]: adminId, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    async stop() {
      await platform.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
