import type { Knex } from 'knex';

/**
 * SQL of file search. Every statement is scoped by `user_id`: a user reads, replaces and finds
 * only their own documents.
 */
export interface NewDocument {
  userId: string;
  documentId: string;
  metadata: Record<string, unknown>;
  tags: string[];
  chunks: string[];
  embeddings: number[][] | null;
}

export interface ChunkHit {
  document_id: string;
  ord: number;
  text: string;
  metadata: Record<string, unknown>;
  score: number;
}

export interface SearchFilter {
  userId: string;
  documentIds?: string[];
  tags?: string[];
}

// An OR of the query's stemmed lexemes (any word matches), next to websearch_to_tsquery's AND:
// chunks holding every word rank above chunks holding some of them.
const LOOSE_QUERY = `(select to_tsquery('simple', coalesce(string_agg(quote_literal(lexeme), ' | '), ''))
                        from unnest(to_tsvector('english', ?)) where lexeme !~ '\\\\')`;

export function createFileSearchStore(knex: Knex) {
  const filtered = (query: Knex.QueryBuilder, filter: SearchFilter) => {
    query.where('c.user_id', filter.userId);
    if (filter.documentIds?.length) query.whereIn('c.document_id', filter.documentIds);
    if (filter.tags?.length) query.whereRaw('d.tags && ?::text[]', [filter.tags]);
    return query;
  };
  return {
    /**
     * Replaces the document (and all its chunks) in one transaction. The document row is upserted
     * first, so two calls indexing the same id at once take turns on its row lock (the later one
     * replaces the earlier's chunks) instead of colliding on the primary key.
     */
    async replace(doc: NewDocument): Promise<void> {
      await knex.transaction(async (trx) => {
        const key = { user_id: doc.userId, document_id: doc.documentId };
        const fields = {
          metadata: JSON.stringify(doc.metadata),
          tags: doc.tags,
          chunk_count: doc.chunks.length,
          chars: doc.chunks.reduce((n, c) => n + c.length, 0),
        };
        await trx('mcp_documents')
          .insert({ ...key, ...fields })
          .onConflict(['user_id', 'document_id'])
          .merge({ ...fields, updated_at: trx.fn.now() });
        await trx('mcp_chunks').where(key).delete();
        const rows = doc.chunks.map((text, ord) => ({ ...key, ord, text, embedding: doc.embeddings ? doc.embeddings[ord] : null }));
        for (let i = 0; i < rows.length; i += 500) await trx('mcp_chunks').insert(rows.slice(i, i + 500));
      });
    },

    async fullText(filter: SearchFilter, query: string, limit: number): Promise<ChunkHit[]> {
      const q = knex('mcp_chunks as c')
        .join('mcp_documents as d', function join() {
          this.on('d.user_id', 'c.user_id').andOn('d.document_id', 'c.document_id');
        })
        .crossJoin(knex.raw(`(select websearch_to_tsquery('english', ?) as strict, ${LOOSE_QUERY} as loose) as q`, [query, query]))
        .select('c.document_id', 'c.ord', 'c.text', 'd.metadata')
        .select(knex.raw('ts_rank_cd(c.tsv, q.loose, 32) + case when c.tsv @@ q.strict then 1 else 0 end as score'))
        .whereRaw('c.tsv @@ q.loose')
        .orderBy([{ column: 'score', order: 'desc' }, { column: 'c.document_id' }, { column: 'c.ord' }])
        .limit(limit);
      const rows = await filtered(q, filter);
      return rows.map((r: any) => ({ ...r, score: Number(r.score) }));
    },

    /** The caller's chunks that have embeddings (newest documents first, at most `limit`). */
    async withEmbeddings(filter: SearchFilter, limit: number): Promise<Array<ChunkHit & { embedding: number[] }>> {
      const q = knex('mcp_chunks as c')
        .join('mcp_documents as d', function join() {
          this.on('d.user_id', 'c.user_id').andOn('d.document_id', 'c.document_id');
        })
        .select('c.document_id', 'c.ord', 'c.text', 'd.metadata', 'c.embedding')
        .whereNotNull('c.embedding')
        .orderBy([{ column: 'd.updated_at', order: 'desc' }, { column: 'c.ord' }])
        .limit(limit);
      const rows = await filtered(q, filter);
      return rows.map((r: any) => ({ ...r, score: 0, embedding: (r.embedding as unknown[]).map(Number) }));
    },
  };
}
export type FileSearchStore = ReturnType<typeof createFileSearchStore>;
