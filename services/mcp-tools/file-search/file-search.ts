import { newId, type Logger } from '../../kit/index.js';
import { ToolFailure } from '../tools/tool.js';
import { chunkText } from './chunking.js';
import { cosine, reciprocalRankFusion, type Embedder } from './embeddings.js';
import type { ChunkHit, FileSearchStore } from './store.js';

/**
 * Per-user document search. Full-text ranking (PostgreSQL tsvector) always runs; with an
 * embeddings endpoint configured, a vector ranking over the caller's chunks runs beside it and
 * the two lists are fused by reciprocal rank (RRF), so either signal can lift a chunk.
 */
export interface FileSearchDeps {
  store: FileSearchStore;
  embedder: Embedder | null;
  logger: Logger;
  chunkChars: number;
  chunkOverlap: number;
  /** Documents one user may keep indexed (`FILE_SEARCH_MAX_DOCUMENTS_PER_USER`). */
  maxDocumentsPerUser: number;
  /** Candidate chunks the vector ranking reads per query. */
  vectorCandidates?: number;
}

export interface IndexInput {
  document_id?: string;
  text: string;
  metadata?: Record<string, unknown>;
  tags?: string[];
}

export interface QueryInput {
  query: string;
  top_k: number;
  document_ids?: string[];
  tags?: string[];
}

export interface QueryResult {
  document_id: string;
  chunk_id: string;
  score: number;
  text: string;
  metadata: Record<string, unknown>;
}

export function createFileSearch(deps: FileSearchDeps) {
  const chunkId = (hit: { document_id: string; ord: number }) => `${hit.document_id}#${hit.ord}`;
  return {
    hybrid: deps.embedder !== null,

    async index(userId: string, input: IndexInput, signal: AbortSignal) {
      const documentId = input.document_id ?? newId('document');
      // The tool's schema refuses such a text already; here too, so no caller stores an empty document against the quota.
      if (!/\S/.test(input.text)) throw new ToolFailure("'arguments.text': must contain text, not only whitespace; nothing was indexed");
      // Checked before the embeddings are paid for; checked again, under the user's lock, as it is stored.
      if (!(await deps.store.hasRoomFor(userId, documentId, deps.maxDocumentsPerUser))) throw quotaFailure(deps.maxDocumentsPerUser);
      const chunks = chunkText(input.text, deps.chunkChars, deps.chunkOverlap);
      let embeddings: number[][] | null = null;
      if (deps.embedder && chunks.length > 0) {
        try {
          embeddings = await deps.embedder.embed(chunks, signal);
        } catch (error) {
          // A cancelled call stores nothing; otherwise full-text search still finds the document
          // and the vector side simply does not see it.
          if (signal.aborted) throw error;
          deps.logger.warn({ err: (error as Error).message, user_id: userId }, 'embeddings unavailable; indexed for full-text search only');
        }
      }
      // Last point at which a cancel stops the call: once stored, the document stays, and the call
      // answers that it was indexed even when the cancel lands while the transaction commits.
      signal.throwIfAborted();
      const stored = await deps.store.replace({ userId, documentId, metadata: input.metadata ?? {}, tags: input.tags ?? [], chunks, embeddings }, deps.maxDocumentsPerUser);
      if (stored === 'over_quota') throw quotaFailure(deps.maxDocumentsPerUser);
      if (stored === 'user_gone') throw userGoneFailure();
      return { document_id: documentId, chunks: chunks.length, status: 'indexed' as const, embedded: embeddings !== null };
    },

    async query(userId: string, input: QueryInput, signal: AbortSignal): Promise<QueryResult[]> {
      const filter = { userId, documentIds: input.document_ids, tags: input.tags };
      const depth = Math.max(input.top_k * 4, 50);
      const textHits = await deps.store.fullText(filter, input.query, depth);
      let vectorHits: ChunkHit[] = [];
      if (deps.embedder) {
        try {
          const [queryVector] = await deps.embedder.embed([input.query], signal);
          const candidates = await deps.store.withEmbeddings(filter, deps.vectorCandidates ?? 5000);
          // A chunk with no similarity at all (cosine <= 0, or 0 for a vector of another size, as when
          // the embeddings model changed) is not a match: ranked, it would fill the results with the newest chunks.
          vectorHits = candidates
            .map((c) => ({ ...c, score: cosine(queryVector!, c.embedding) }))
            .filter((c) => c.score > 0)
            .sort((a, b) => b.score - a.score)
            .slice(0, depth);
        } catch (error) {
          deps.logger.warn({ err: (error as Error).message, user_id: userId }, 'embeddings unavailable; full-text ranking only');
        }
      }
      if (vectorHits.length === 0) return textHits.slice(0, input.top_k).map((hit) => present(hit, chunkId(hit), hit.score));
      const byId = new Map<string, ChunkHit>();
      for (const hit of [...textHits, ...vectorHits]) byId.set(chunkId(hit), hit);
      const fused = reciprocalRankFusion([textHits.map(chunkId), vectorHits.map(chunkId)]);
      return [...fused.entries()]
        .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
        .slice(0, input.top_k)
        .map(([id, score]) => present(byId.get(id)!, id, score));
    },
  };
}
export type FileSearch = ReturnType<typeof createFileSearch>;

/** A new document past the user's quota: an error result naming the argument, as an argument error does. */
const quotaFailure = (max: number) =>
  new ToolFailure(
    `'arguments.document_id': you already have ${max} indexed documents, the most one user may keep (FILE_SEARCH_MAX_DOCUMENTS_PER_USER); ` +
      'index under the document_id of one of them to replace it',
  );

/**
 * The user was deleted while the call ran, after the kit let the request in as theirs: the words of
 * the kit's refusal of an unknown user. Expected (an operator removed the account), so it is the
 * caller's error result, not a failure logged as unexpected.
 */
const userGoneFailure = () => new ToolFailure('Unknown or disabled user: the user this call runs as no longer exists; nothing was indexed');

const present = (hit: ChunkHit, chunk_id: string, score: number): QueryResult => ({
  document_id: hit.document_id,
  chunk_id,
  score: Math.round(score * 1e6) / 1e6,
  text: hit.text,
  metadata: hit.metadata ?? {},
});
