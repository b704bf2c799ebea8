/**
 * One completion through llm-api's provider pool, in a process of its own, printed as JSON:
 * `{"content"}` or `{"error","code"}`. For tests that need the process to trust a certificate the
 * test made: Node reads NODE_EXTRA_CA_CERTS only when a process starts.
 *   PROVIDER_URL=https://127.0.0.1:1234/v1/chat/completions HTTP_VERSION=2 node --import tsx test/fakes/provider-call.ts
 */
import { createUpstream } from '../../services/llm-api/routing/upstream.js';

const upstream = createUpstream({
  connections: 4,
  connectTimeoutMs: 5_000,
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 10_000,
  httpVersion: process.env.HTTP_VERSION === '2' ? '2' : '1.1',
});
try {
  const answer = await upstream.postJson(process.env.PROVIDER_URL!, '{"model":"m"}', { apiKey: 'sk-provider', requestId: 'req-tls' });
  const { bytes } = await answer.readAll(1 << 20);
  process.stdout.write(JSON.stringify({ content: JSON.parse(bytes.toString()).choices[0].message.content }));
} catch (error) {
  process.stdout.write(JSON.stringify({ error: (error as Error).name, code: (error as { code?: string }).code }));
} finally {
  await upstream.close();
}
