import test from 'ava';
import { Registry } from 'prom-client';
import { createLogger } from '../../services/kit/index.js';
import { createFileSearch } from '../../services/mcp-tools/file-search/file-search.js';
import type { FileSearchStore } from '../../services/mcp-tools/file-search/store.js';
import { createToolCaller } from '../../services/mcp-tools/tools/call-tool.js';
import { createCatalog } from '../../services/mcp-tools/tools/catalog.js';
import { fileSearchIndexTool } from '../../services/mcp-tools/tools/file-search-index.js';
import { createToolMetrics } from '../../services/mcp-tools/tools/metrics.js';

// A cancelled call was answered "The call was cancelled" whenever the cancel had come by the time
// the tool returned, so a file_search_index whose document was committed as the cancel landed told
// the client nothing happened while the document stayed indexed. Now the answer says what the tool
// did: indexed when the cancel lands after the commit; cancelled, with nothing stored, when it
// lands before the document is stored (the embeddings answer already in). The cancel is sent at a
// fixed point of the call by the store and embedder standing in for PostgreSQL and the endpoint.
const logger = createLogger({ level: 'silent', name: 'cancel-after-commit-test' });
const signal = new AbortController().signal;

function indexing(hooks: { afterCommit?: () => void; onEmbed?: () => void }) {
  const committed: string[] = [];
  const store = {
    hasRoomFor: async () => true,
    replace: async (doc: { documentId: string }) => {
      committed.push(doc.documentId);
      hooks.afterCommit?.();
      return 'stored' as const;
    },
  } as unknown as FileSearchStore;
  const embedder = {
    embed: async (texts: string[]) => {
      hooks.onEmbed?.();
      return texts.map(() => [1, 0, 0, 0]);
    },
  };
  const fileSearch = createFileSearch({ store, embedder, logger, chunkChars: 1000, chunkOverlap: 100, maxDocumentsPerUser: 10 });
  const callTool = createToolCaller({
    catalog: createCatalog([fileSearchIndexTool({ fileSearch })]),
    switches: { isEnabled: () => true },
    metrics: createToolMetrics(new Registry()),
    logger,
    maxConcurrentCalls: 8,
  });
  return { callTool, committed };
}

test('a cancel that lands after the document was committed answers that it was indexed', async (t) => {
  const hooks: { afterCommit?: () => void } = {};
  const { callTool, committed } = indexing(hooks);
  let cancelled = false;
  hooks.afterCommit = () => (cancelled = callTool.cancel('usr_a', 1, 'too late'));
  const result = await callTool({ userId: 'usr_a', requestId: 1, signal }, 'file_search_index', { document_id: 'doc-1', text: 'some text to index' });
  t.true(cancelled, 'the cancel reached the running call');
  t.deepEqual(committed, ['doc-1']);
  t.falsy(result.isError, JSON.stringify(result));
  t.like(result.structuredContent, { document_id: 'doc-1', status: 'indexed', embedded: true });
});

test('a cancel that lands before the document is stored stores nothing and answers cancelled', async (t) => {
  const hooks: { onEmbed?: () => void } = {};
  const { callTool, committed } = indexing(hooks);
  // The embeddings answer was already in when the cancel came: the embedder returns all the same.
  hooks.onEmbed = () => void callTool.cancel('usr_b', 2, 'stop');
  const result = await callTool({ userId: 'usr_b', requestId: 2, signal }, 'file_search_index', { document_id: 'doc-2', text: 'some text to index' });
  t.deepEqual(committed, [], 'nothing stored');
  t.true(result.isError);
  t.is((result.content[0] as { text: string }).text, 'The call was cancelled');
});
