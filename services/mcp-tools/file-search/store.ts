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

export type ReplaceOutcome = 'stored' | 'over_quota' | 'user_gone';

/** The document's owner is not in `users` (foreign key violation on `mcp_documents_user_fk`). */
const isOwnerGone = (error: unknown): boolean => {
  const { code, constraint } = (error ?? {}) as { code?: string; constraint?: string };
  return code === '23503' && constraint === 'mcp_documents_user_fk';
};

export function createFileSearchStore(knex: Knex) {
  const filtered = (query: Knex.QueryBuilder, filter: SearchFilter) => {
    query.where('c.user_id', filter.userId);
    if (filter.documentIds?.length) query.whereIn('c.document_id', filter.documentIds);
    if (filter.tags?.length) query.whereRaw('d.tags && ?::text[]', [filter.tags]);
    return query;
  };
  /**
   * Whether the user may store `documentId`: it is one of theirs already (indexing it again
   * replaces it), or they hold fewer than `maxDocuments`. `db`: the transaction holding the
   * user's lock (the authoritative check), or none (a cheap check before the embeddings cost).
   */
  const hasRoomFor = async (userId: string, documentId: string, maxDocuments: number, db: Knex | Knex.Transaction = knex): Promise<boolean> => {
    if (await db('mcp_documents').where({ user_id: userId, document_id: documentId }).first('document_id')) return true;
    // At most `maxDocuments` rows are read, whatever the user holds.
    const held = await db.from(db('mcp_documents').where({ user_id: userId }).select('document_id').limit(maxDocuments).as('held')).count<{ n: string | number }[]>({ n: '*' });
    return Number(held[0]?.n ?? 0) < maxDocuments;
  };
  return {
    hasRoomFor,

    /**
     * Replaces the document (and all its chunks) in one transaction; false, and nothing written,
     * when it is a new document and the user already holds `maxDocuments`. The user's documents are
     * counted under a lock of the user's own (a transaction-scoped advisory lock), so two new
     * documents indexed at once cannot both pass the count taken before either was stored. The
     * document row is upserted first, so two calls indexing the same id take turns on its row lock
     * (the later one replaces the earlier's chunks) instead of colliding on the primary key.
     * `user_gone`, and nothing written, when the user's row was deleted while the call ran (the
     * identity was checked as the request arrived): the document's foreign key to `users` refuses it.
     */
    async replace(doc: NewDocument, maxDocuments: number): Promise<ReplaceOutcome> {
      return knex.transaction(async (trx): Promise<ReplaceOutcome> => {
        await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`mcp_documents:${doc.userId}`]);
        if (!(await hasRoomFor(doc.userId, doc.documentId, maxDocuments, trx))) return 'over_quota';
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
        return 'stored';
      }).catch((error: unknown) => {
        if (isOwnerGone(error)) return 'user_gone';
        throw error;
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
