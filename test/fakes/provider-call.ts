/**
 * Completions through llm-api's provider pool, in a process of its own, printed as JSON:
 * `{"contents"}` (one per completion) or `{"error","code"}`. For tests that need the process to
 * trust a certificate the test made: Node reads NODE_EXTRA_CA_CERTS only when a process starts.
 *   PROVIDER_URL=https://127.0.0.1:1234/v1/chat/completions HTTP_VERSION=2 node --import tsx test/fakes/provider-call.ts
 *   HTTP_VERSION   1.1 (default) | 2 | auto
 *   COMPLETIONS    sent at once (default 1)
 *   WARM=1         one completion first, answered before the others are sent
 *   CONNECTIONS    the pool's bound (default 4)
 */
import { createUpstream } from '../../services/llm-api/routing/upstream.js';

const version = process.env.HTTP_VERSION;
const upstream = createUpstream({
  connections: Number(process.env.CONNECTIONS ?? 4),
  connectTimeoutMs: 5_000,
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 10_000,
  httpVersion: version === '2' || version === 'auto' ? version : '1.1',
});
const complete = async (i: number) => {
  const answer = await upstream.postJson(process.env.PROVIDER_URL!, '{"model":"m"}', { apiKey: 'sk-provider', requestId: `req-tls-${i}` });
  const { bytes } = await answer.readAll(1 << 20);
  return JSON.parse(bytes.toString()).choices[0].message.content as string;
};
try {
  const contents = process.env.WARM === '1' ? [await complete(0)] : [];
  const count = Number(process.env.COMPLETIONS ?? 1);
  contents.push(...(await Promise.all(Array.from({ length: count }, (_, i) => complete(i + 1)))));
  process.stdout.write(JSON.stringify({ contents }));
} catch (error) {
  process.stdout.write(JSON.stringify({ error: (error as Error).name, code: (error as { code?: string }).code }));
} finally {
  await upstream.close();
}
