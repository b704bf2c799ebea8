import test from 'ava';
import nock from 'nock';
import { createLogger } from '../../services/kit/index.js';
import { createEmbedder } from '../../services/mcp-tools/file-search/embeddings.js';
import { createFileSearch } from '../../services/mcp-tools/file-search/file-search.js';
import type { FileSearchStore } from '../../services/mcp-tools/file-search/store.js';
import { ToolFailure } from '../../services/mcp-tools/tools/tool.js';
import { waitFor } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from './helpers.js';

// File search under hostile input and a misbehaving embeddings provider: concurrent re-indexing of
// one document, embedding values a `real[]` column cannot hold, a query vector of another size (the
// operator changed the model), a cancelled index call, and a document over the size limit. The provider is nock in the documented
// OpenAI embeddings shape (https://platform.openai.com/docs/api-reference/embeddings/create); markers
// in an input pick its answer, so the tests of this file can run at once.
const EMBEDDINGS = 'https://embeddings.test';
let p: McpPlatform;

function vectorFor(text: string): number[] {
  const vector = new Array(32).fill(0);
  if (text.includes('zzoverflow')) vector[0] = 1e300;
  if (text.includes('zzunderflow')) vector[1] = 1e-50;
  if (text.includes('zzstring')) vector[2] = 'x';
  if (text.includes('zzwide')) return new Array(64).fill(1);
  if (text.includes('zznarrow')) return new Array(16).fill(1);
  for (const word of text.toLowerCase().match(/[a-z]+/g) ?? []) {
    let h = 0;
    for (const ch of word) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    vector[h % 32] += 1;
  }
  return vector;
}

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
  nock(EMBEDDINGS)
    .persist()
    .post('/v1/embeddings')
    .reply(200, (_uri, body: any) => {
      const input = body.input as string[];
      const duplicate = input.some((text) => text.includes('zzdupindex'));
      const data = input.map((text, index) => ({ object: 'embedding', index: duplicate ? 0 : index, embedding: vectorFor(text) }));
      return { object: 'list', data, model: body.model, usage: { prompt_tokens: 1, total_tokens: 1 } };
    });
  p = await startMcpPlatform({ EMBEDDINGS_URL: `${EMBEDDINGS}/v1`, EMBEDDINGS_MODEL: 'fake-embed', FILE_SEARCH_MAX_DOCUMENT_CHARS: '2000' });
});
test.after.always(async () => {
  await p?.stop();
  nock.cleanAll();
  nock.enableNetConnect();
});

async function call(key: string, name: string, args: Record<string, unknown>) {
  const client = await p.client(key);
  const result: any = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(result.content[0].text);
  return result.structuredContent;
}

test('two calls indexing one document_id at once take turns: the later replaces, neither fails', async (t) => {
  const { user, key } = await p.newUser();
  const knex = p.runtime.db.knex;
  // An index of the same id in flight: its row is written, its transaction still open.
  const trx = await knex.transaction();
  const blocker = Number((await trx.raw('select pg_backend_pid() as pid')).rows[0].pid);
  await trx('mcp_documents').insert({ user_id: user.id, document_id: 'shared', metadata: '{}', tags: [], chunk_count: 0, chars: 0 });
  const later = call(key, 'file_search_index', { document_id: 'shared', text: 'The later writer keeps the lighthouse log.' });
  try {
    await waitFor(async () => (await knex.raw('select 1 from pg_stat_activity where ? = any(pg_blocking_pids(pid))', [blocker])).rows.length > 0, 10_000, 'the second index call waiting');
  } catch (error) {
    await trx.rollback();
    throw error;
  }
  await trx.commit();
  const indexed = await later;
  t.is(indexed.chunks, 1);
  const results = await call(key, 'file_search_query', { query: 'lighthouse log' });
  t.is(results.results.length, 1);
  t.is(results.results[0].chunk_id, 'shared#0');
  t.like(await knex('mcp_documents').where({ user_id: user.id, document_id: 'shared' }).first(), { chunk_count: 1 });
});

test('embedding values a real[] cannot hold index the document for full-text search instead of failing it', async (t) => {
  const { key } = await p.newUser();
  const overflow = await call(key, 'file_search_index', { document_id: 'big', text: 'Keeper zzoverflow notes about the brass bell.' });
  t.like(overflow, { chunks: 1, embedded: false });
  const string = await call(key, 'file_search_index', { document_id: 'str', text: 'Keeper zzstring notes about the foghorn.' });
  t.like(string, { chunks: 1, embedded: false });
  // A value below the smallest real is stored as the real it rounds to (zero).
  const underflow = await call(key, 'file_search_index', { document_id: 'tiny', text: 'Keeper zzunderflow notes about the lens.' });
  t.like(underflow, { chunks: 1, embedded: true });
  const found = await call(key, 'file_search_query', { query: 'brass bell', top_k: 3 });
  t.is(found.results[0].document_id, 'big');
});

test('a query vector of another size (the embeddings model changed) ranks nothing instead of everything', async (t) => {
  const { key } = await p.newUser();
  t.like(await call(key, 'file_search_index', { document_id: 'garden', text: 'Plant the tulip bulbs in autumn.' }), { embedded: true });
  t.like(await call(key, 'file_search_index', { document_id: 'garage', text: 'The sedan needs new tyres.' }), { embedded: true });
  t.deepEqual((await call(key, 'file_search_query', { query: 'zzwide quantum chromodynamics' })).results, []);
  // The full-text side still answers under the new model.
  const tulips = await call(key, 'file_search_query', { query: 'zzwide tulip bulbs' });
  t.deepEqual(tulips.results.map((r: any) => r.document_id), ['garden']);
});

test('an embeddings answer with indexes out of place or vectors of different sizes is refused', async (t) => {
  const embedder = createEmbedder({ url: `${EMBEDDINGS}/v1`, model: 'fake-embed', timeoutMs: 5000 });
  const signal = new AbortController().signal;
  t.is((await embedder.embed(['one', 'two'], signal)).length, 2);
  await t.throwsAsync(embedder.embed(['one zzdupindex', 'two'], signal), { message: /one embedding per input/ });
  await t.throwsAsync(embedder.embed(['one', 'two zznarrow'], signal), { message: /of one length/ });
});

test('a cancelled index call stores nothing (no half-indexed document after the client went away)', async (t) => {
  const stored: string[] = [];
  const store = { hasRoomFor: async () => true, replace: async (doc: { documentId: string }) => void stored.push(doc.documentId) } as unknown as FileSearchStore;
  const controller = new AbortController();
  const embedder = {
    embed: (_texts: string[], signal: AbortSignal) =>
      new Promise<number[][]>((_resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason));
        controller.abort(new Error('client went away'));
      }),
  };
  const fileSearch = createFileSearch({ store, embedder, logger: createLogger({ level: 'silent', name: 'file-search-test' }), chunkChars: 300, chunkOverlap: 60, maxDocumentsPerUser: 10 });
  await t.throwsAsync(fileSearch.index('user_x', { document_id: 'doc', text: 'Some text.' }, controller.signal), { message: 'client went away' });
  t.deepEqual(stored, []);
});

test('the index call itself refuses a text of only whitespace, naming arguments.text, before the quota is asked or anything stored', async (t) => {
  const calls: string[] = [];
  const store = {
    hasRoomFor: async () => (calls.push('hasRoomFor'), true),
    replace: async () => void calls.push('replace'),
  } as unknown as FileSearchStore;
  const fileSearch = createFileSearch({ store, embedder: null, logger: createLogger({ level: 'silent', name: 'file-search-test' }), chunkChars: 300, chunkOverlap: 60, maxDocumentsPerUser: 10 });
  const error = await t.throwsAsync(fileSearch.index('user_x', { document_id: 'blank', text: ' \n\t\u00a0 ' }, new AbortController().signal));
  t.true(error instanceof ToolFailure);
  t.regex(error!.message, /'arguments\.text'/);
  t.deepEqual(calls, []);
});

test('a document over FILE_SEARCH_MAX_DOCUMENT_CHARS is an argument error naming arguments.text, and tools/list publishes the bound', async (t) => {
  const { key } = await p.newUser();
  const client = await p.client(key);
  const listed = (await client.listTools()).tools.find((tool) => tool.name === 'file_search_index')!;
  t.is((listed.inputSchema.properties as any).text.maxLength, 2000);
  t.like(await call(key, 'file_search_index', { document_id: 'at-limit', text: 'y'.repeat(2000) }), { status: 'indexed' });
  const over: any = await client.callTool({ name: 'file_search_index', arguments: { document_id: 'over', text: 'y'.repeat(2001) } });
  t.true(over.isError);
  t.regex(over.content[0].text, /'arguments\.text'/);
  // A client of an earlier protocol version gets JSON-RPC invalid params naming the field.
  const rpc = await p.rpc(key, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'file_search_index', arguments: { text: 'y'.repeat(2001) } } });
  t.is(rpc.json.error.code, -32602);
  t.is(rpc.json.error.data.param, 'arguments.text');
});
