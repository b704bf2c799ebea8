import { z } from 'zod';
import type { FileSearch } from '../file-search/file-search.js';
import { defineTool } from './tool.js';

export const documentId = z.string().min(1).max(128).regex(/^[A-Za-z0-9_.:-]+$/, 'letters, digits and _ . : - only');
export const tag = z.string().min(1).max(64);

/**
 * The arguments; `maxChars` bounds the text in the schema itself, so an over-long document is an
 * argument error naming `arguments.text` and `tools/list` publishes the bound (`maxLength`).
 */
const inputOf = (maxChars: number | undefined) =>
  z
    .object({
      document_id: documentId.optional().describe('Your id for the document; indexing the same id again replaces it. Generated when absent.'),
      // Only whitespace would be stored as a document of no chunks that nothing finds, yet one of the user's quota.
      text: (maxChars === undefined ? z.string().min(1) : z.string().min(1).max(maxChars))
        .regex(/\S/, 'must contain text, not only whitespace')
        .describe('The document text to make searchable.'),
      metadata: z
        .record(z.string().max(64), z.unknown())
        .refine((m) => Object.keys(m).length <= 32, 'at most 32 keys')
        .refine((m) => JSON.stringify(m).length <= 16_384, 'at most 16 KiB as JSON')
        .optional()
        .describe('Returned with every matching chunk (e.g. title, source URL).'),
      tags: z.array(tag).max(32).optional().describe('Labels to filter queries by.'),
    })
    .strict();

const output = z.object({ document_id: z.string(), chunks: z.number().int(), status: z.literal('indexed'), embedded: z.boolean() });

export function fileSearchIndexTool(deps: { fileSearch: FileSearch; maxChars?: number }) {
  return defineTool({
    name: 'file_search_index',
    title: 'Index a document',
    description:
      'Stores a text document in your private search index so file_search_query can find passages in it. ' +
      'The text is split into overlapping chunks. Reusing a document_id replaces that document. ' +
      'Documents are visible only to you.',
    input: inputOf(deps.maxChars),
    output,
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    async run(ctx, args) {
      const result = await deps.fileSearch.index(ctx.userId, args, ctx.signal);
      return { structured: result, text: `Indexed ${result.document_id}: ${result.chunks} chunk(s).` };
    },
  });
}
