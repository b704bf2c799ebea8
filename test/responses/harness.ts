import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

/**
 * The whole platform behind the embedded edge with a scripted fake provider serving `fake-model`,
 * for the Responses tests: clients are the official `openai` SDK through the edge.
 */
export interface ResponsesPlatform extends McpPlatform {
  fake: FakeUpstream;
  /** A new ordinary user and an `openai` client acting as them through the edge. */
  newClient(): Promise<{ client: OpenAI; key: string; userId: string }>;
}

export const MODEL = 'fake-model';
/** A model whose catalog entry supports reasoning (what deep research needs). */
export const REASONING_MODEL = 'fake-reasoner';

export async function startResponsesPlatform(env: Record<string, string | undefined> = {}): Promise<ResponsesPlatform> {
  const fake = await startFakeUpstream({ name: 'scripted', models: [{ id: MODEL }, { id: REASONING_MODEL, supported_parameters: ['reasoning', 'tools'] }] });
  const p = await startMcpPlatform({ LLM_HEALTH_PROBE_INTERVAL_MS: '0', RESPONSES_CANCEL_POLL_MS: '50', ...env });
  const created = await p.api(p.adminKey, 'POST', '/v1/admin/providers', { name: 'Scripted', vendor: 'fake', base_url: fake.url });
  if (created.status !== 201) throw new Error(`provider: ${created.status} ${JSON.stringify(created.json)}`);
  const stop = p.stop.bind(p);
  return Object.assign(p, {
    fake,
    async newClient() {
      const { user, key } = await p.newUser();
      return { client: new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key, maxRetries: 0 }), key, userId: user.id };
    },
    async stop() {
      await stop();
      await fake.close();
    },
  });
}

/** The text of the last tool message the model was sent. */
export const lastToolOutput = (messages: any[]) => String([...messages].reverse().find((m) => m.role === 'tool')?.content ?? '');
