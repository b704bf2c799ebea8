import { createTrustedEndpoint } from '../../kit/index.js';

/**
 * An OpenAI-compatible embeddings endpoint (`POST {EMBEDDINGS_URL}/embeddings`, `{model, input}` →
 * `{data: [{index, embedding}]}`), configured by the operator, called through the kit's
 * trusted-endpoint client (timeout, answer size), in batches of 64 inputs.
 */
export interface Embedder {
  embed(texts: string[], signal: AbortSignal): Promise<number[][]>;
}

/**
 * A batch's answer: 64 vectors of a few thousand dimensions, each number as JSON text, stay well
 * under this; an answer past it is refused rather than held in memory.
 */
const EMBEDDINGS_ANSWER_MAX_BYTES = 64 * 1024 * 1024;

export function createEmbedder(options: { url: string; model: string; apiKey?: string; timeoutMs: number }): Embedder {
  const endpoint = createTrustedEndpoint({
    name: 'the embeddings endpoint',
    baseUrl: options.url,
    timeoutMs: options.timeoutMs,
    maxBytes: EMBEDDINGS_ANSWER_MAX_BYTES,
    headers: options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {},
  });
  return {
    async embed(texts, signal) {
      const out: number[][] = [];
      for (let i = 0; i < texts.length; i += 64) {
        const batch = texts.slice(i, i + 64);
        const body = await endpoint.json<{ data?: Array<{ index?: number; embedding?: number[] }> }>('embeddings', { json: { model: options.model, input: batch }, signal });
        const data = [...(body?.data ?? [])].sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
        if (data.length !== batch.length || data.some((d, i) => (d.index ?? i) !== i)) throw new Error('the embeddings endpoint answered without one embedding per input');
        const width = out[0]?.length ?? data[0]?.embedding?.length;
        for (const d of data) {
          const vector = asRealVector(d.embedding);
          if (vector === null || vector.length !== width) throw new Error('the embeddings endpoint answered with an embedding that is not a list of numbers of one length');
          out.push(vector);
        }
      }
      return out;
    },
  };
}

/**
 * `value` as the `real` (float4) numbers it is stored as, or null when it is not a non-empty list of
 * numbers that fit one: PostgreSQL refuses a value that overflows or underflows `real`, and that
 * would fail the whole document rather than only its vector side.
 */
function asRealVector(value: unknown): number[] | null {
  if (!Array.isArray(value) || value.length === 0) return null;
  const vector = new Array<number>(value.length);
  for (let i = 0; i < value.length; i++) {
    const x = value[i];
    if (typeof x !== 'number') return null;
    vector[i] = Math.fround(x);
    if (!Number.isFinite(vector[i])) return null;
  }
  return vector;
}

export function cosine(a: number[], b: number[]): number {
  if (a.length !== b.length || a.length === 0) return 0;
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}

/** Reciprocal rank fusion: each list contributes 1 / (k + rank) for every item it ranks. */
export function reciprocalRankFusion(lists: string[][], k = 60): Map<string, number> {
  const scores = new Map<string, number>();
  for (const list of lists) list.forEach((key, rank) => scores.set(key, (scores.get(key) ?? 0) + 1 / (k + rank + 1)));
  return scores;
}
