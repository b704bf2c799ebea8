import { llmApiService } from '../../services/llm-api/service.js';
import { startTestService, type TestService } from '../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';

/** llm-api on an isolated runtime with an admin and a plain user, plus small JSON call helpers. */
export interface LlmHarness {
  service: TestService;
  url: string;
  admin: TestUser;
  user: TestUser;
  headers(who?: TestUser): Record<string, string>;
  call(method: string, path: string, body?: unknown, who?: TestUser | null, extra?: Record<string, string>): Promise<{ status: number; body: any; headers: Headers }>;
  close(): Promise<void>;
}

export async function startLlmHarness(env: Record<string, string | undefined> = {}, options: { clock?: import('../../services/kit/index.js').Clock } = {}): Promise<LlmHarness> {
  const service = await startTestService(llmApiService, {
    env: { LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_CATALOG_POLL_MS: '0', LLM_USAGE_FLUSH_MS: '50', ...env },
    clock: options.clock,
  });
  const knex = service.runtime.db.knex;
  const admin = await createTestUser(knex, { admin: true });
  const user = await createTestUser(knex);
  const headers = (who: TestUser = admin) => edgeHeaders(service.gatewaySecret, who);
  return {
    service,
    url: service.url,
    admin,
    user,
    headers,
    async call(method, path, body, who = admin, extra = {}) {
      const h: Record<string, string> = who === null ? { 'x-gateway-token': service.gatewaySecret } : headers(who);
      if (body !== undefined) h['content-type'] = 'application/json';
      const res = await fetch(service.url + path, { method, headers: { ...h, ...extra }, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      let parsed: any = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON (SSE)
      }
      return { status: res.status, body: parsed, headers: res.headers };
    },
    close: () => service.close(),
  };
}
