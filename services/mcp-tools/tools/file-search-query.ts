import { z } from 'zod';
import type { FileSearch } from '../file-search/file-search.js';
import { documentId, tag } from './file-search-index.js';
import { defineTool } from './tool.js';

const input = z
  .object({
    query: z.string().trim().min(1).max(2048).describe('What to look for, in words.'),
    top_k: z.number().int().min(1).max(20).default(5).describe('How many passages to return (default 5, max 20).'),
    document_ids: z.array(documentId).max(100).optional().describe('Search only these documents.'),
    tags: z.array(tag).max(32).optional().describe('Search only documents carrying at least one of these tags.'),
  })
  .strict();

const output = z.object({
  results: z.array(
    z.object({ document_id: z.string(), chunk_id: z.string(), score: z.number(), text: z.string(), metadata: z.record(z.string(), z.unknown()) }),
  ),
});

export function fileSearchQueryTool(deps: { fileSearch: FileSearch }) {
  return defineTool({
    name: 'file_search_query',
    title: 'Search your documents',
    description:
      'Finds the passages of your indexed documents (see file_search_index) that best match a query, best first, ' +
      'with their document id, chunk id, score and metadata. Only your own documents are searched.',
    input,
    output,
    annotations: { readOnlyHint: true, openWorldHint: false, idempotentHint: true },
    async run(ctx, args) {
      const results = await deps.fileSearch.query(ctx.userId, args, ctx.signal);
      const text = results.length
        ? results.map((r, i) => `[${i + 1}] ${r.chunk_id} (score ${r.score})\n${r.text}`).join('\n\n')
        : `No passages match "${args.query}".`;
      return { structured: { results }, text };
    },
  });
}
