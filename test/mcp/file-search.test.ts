import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { startMcpPlatform, type McpPlatform } from './helpers.js';

// file_search_index → file_search_query through the edge with the SDK client: full-text ranking
// finds the right chunk first, re-indexing replaces, filters work, and a user never sees another
// user's documents. A second platform adds a local OpenAI-compatible embeddings server, so the
// ranking becomes hybrid (reciprocal rank fusion) and finds a passage by meaning alone.
let p: McpPlatform;
let hybrid: McpPlatform;
let embeddings: http.Server;
let embeddingCalls = 0;

// A tiny "semantic" embedder: words map to concepts (synonyms share one), hashed into 32 dimensions.
const CONCEPTS: Record<string, string> = { car: 'vehicle', automobile: 'vehicle', vehicle: 'vehicle', sedan: 'vehicle', feline: 'cat', cat: 'cat', kitten: 'cat' };
function embed(text: string): number[] {
  const vector = new Array(32).fill(0);
  for (const word of text.toLowerCase().match(/[a-z]+/g) ?? []) {
    const concept = CONCEPTS[word] ?? word;
    let h = 0;
    for (const ch of concept) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    vector[h % 32] += CONCEPTS[word] ? 5 : 1;
  }
  return vector;
}

test.before(async () => {
  embeddings = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      embeddingCalls++;
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (req.url !== '/v1/embeddings' || req.headers.authorization !== 'Bearer emb-key' || body.model !== 'fake-embed') {
        return res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"bad request"}}');
      }
      const data = (body.input as string[]).map((text, index) => ({ object: 'embedding', index, embedding: embed(text) }));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data, model: body.model, usage: { prompt_tokens: 1, total_tokens: 1 } }));
    });
  });
  await new Promise<void>((resolve) => embeddings.listen(0, '127.0.0.1', resolve));
  const port = (embeddings.address() as AddressInfo).port;
  [p, hybrid] = await Promise.all([
    startMcpPlatform({ FILE_SEARCH_CHUNK_CHARS: '300', FILE_SEARCH_CHUNK_OVERLAP: '60' }),
    startMcpPlatform({ EMBEDDINGS_URL: `http://127.0.0.1:${port}/v1`, EMBEDDINGS_MODEL: 'fake-embed', EMBEDDINGS_API_KEY: 'emb-key' }),
  ]);
});
test.after.always(async () => {
  await p?.stop();
  await hybrid?.stop();
  embeddings?.close();
});

const GUIDE = [
  'Chapter one. The lighthouse keeper wakes before dawn to trim the wick and polish the great lens, a ritual repeated for forty years on the rocky island.',
  'Chapter two. Supplies arrive by boat each month: flour, lamp oil, letters from the mainland, and sometimes a crate of oranges that the keeper shares with the gulls.',
  'Chapter three. During the winter storm of 1953 the foghorn failed, and the keeper rang the brass bell by hand for thirty hours until the fishing fleet was safely home.',
  'Chapter four. When the light was automated, the keeper moved to the village and opened a small museum of maritime instruments, charts and ship models.',
].join('\n\n');

async function index(platform: McpPlatform, key: string, args: Record<string, unknown>) {
  const client = await platform.client(key);
  const result: any = await client.callTool({ name: 'file_search_index', arguments: args });
  if (result.isError) throw new Error(result.content[0].text);
  return result.structuredContent;
}

async function query(platform: McpPlatform, key: string, args: Record<string, unknown>) {
  const client = await platform.client(key);
  const result: any = await client.callTool({ name: 'file_search_query', arguments: args });
  if (result.isError) throw new Error(result.content[0].text);
  return result.structuredContent.results as any[];
}

test('index → query finds the right chunk first, with its document, chunk id and metadata', async (t) => {
  const { key } = await p.newUser();
  const indexed = await index(p, key, { document_id: 'keeper-memoir', text: GUIDE, metadata: { title: 'The Keeper', year: 1960 }, tags: ['history'] });
  t.is(indexed.document_id, 'keeper-memoir');
  t.is(indexed.status, 'indexed');
  t.true(indexed.chunks >= 3, `chunks: ${indexed.chunks}`);
  t.false(indexed.embedded);
  await index(p, key, { document_id: 'recipes', text: 'Orange marmalade: boil the oranges whole, slice them thin, add sugar and lemon, and cook until it sets.' });
  await index(p, key, { document_id: 'storms', text: 'Storm preparation checklist for sailors: reef the sails early, check the bilge pump, and listen for the foghorn near the harbour.' });

  const bell = await query(p, key, { query: 'who rang the bell when the foghorn failed in the storm?' });
  t.is(bell[0].document_id, 'keeper-memoir');
  t.regex(bell[0].text, /rang the brass bell by hand/);
  t.regex(bell[0].chunk_id, /^keeper-memoir#\d+$/);
  t.deepEqual(bell[0].metadata, { title: 'The Keeper', year: 1960 });
  t.true(bell[0].score > (bell[1]?.score ?? 0));

  const museum = await query(p, key, { query: 'museum of ship models', top_k: 2 });
  t.is(museum.length <= 2, true);
  t.regex(museum[0].text, /opened a small museum/);

  const oranges = await query(p, key, { query: 'oranges', top_k: 5 });
  t.deepEqual([...new Set(oranges.map((r) => r.document_id))].sort(), ['keeper-memoir', 'recipes']);
  t.is((await query(p, key, { query: 'oranges', document_ids: ['recipes'] })).map((r) => r.document_id).join(), 'recipes');
  t.is((await query(p, key, { query: 'oranges', tags: ['history'] }))[0].document_id, 'keeper-memoir');
  t.deepEqual(await query(p, key, { query: 'quantum chromodynamics' }), []);
});

test('re-indexing a document_id replaces it; a generated id is returned when none is given', async (t) => {
  const { key } = await p.newUser();
  await index(p, key, { document_id: 'notes', text: 'The password hint is a purple elephant.' });
  t.is((await query(p, key, { query: 'purple elephant' })).length, 1);
  const again = await index(p, key, { document_id: 'notes', text: 'The meeting moved to Thursday afternoon.' });
  t.is(again.chunks, 1);
  t.deepEqual(await query(p, key, { query: 'purple elephant' }), []);
  t.is((await query(p, key, { query: 'meeting Thursday' }))[0].document_id, 'notes');
  const generated = await index(p, key, { text: 'An untitled scrap about zebras.' });
  t.regex(generated.document_id, /^doc_[0-9A-Za-z]{24}$/);
});

test("a user never finds another user's documents, even under the same document_id", async (t) => {
  const alice = await p.newUser();
  const bob = await p.newUser();
  await index(p, alice.key, { document_id: 'diary', text: 'Alice hid the spare key under the blue flowerpot.' });
  await index(p, bob.key, { document_id: 'diary', text: 'Bob keeps his spare key with the neighbour.' });
  const asBob = await query(p, bob.key, { query: 'spare key blue flowerpot', top_k: 20 });
  t.true(asBob.every((r) => !r.text.includes('Alice')));
  t.regex(asBob[0].text, /^Bob/);
  const asAlice = await query(p, alice.key, { query: 'spare key neighbour', top_k: 20, document_ids: ['diary'] });
  t.true(asAlice.every((r) => !r.text.includes('Bob')));
  const carol = await p.newUser();
  t.deepEqual(await query(p, carol.key, { query: 'spare key', top_k: 20 }), []);
});

test('bad file search arguments are error results naming the field (the SDK client speaks 2025-11-25)', async (t) => {
  const { key } = await p.newUser();
  const client = await p.client(key);
  for (const [name, args, field] of [
    ['file_search_query', { query: 'x', top_k: 21 }, /arguments\.top_k/],
    ['file_search_index', { document_id: 'a b', text: 'x' }, /arguments\.document_id/],
    ['file_search_index', { text: '' }, /arguments\.text/],
    ['file_search_index', { document_id: 'blank', text: ' \n\t ' }, /arguments\.text/],
  ] as const) {
    const result: any = await client.callTool({ name, arguments: args });
    t.true(result.isError, name);
    t.regex(result.content[0].text, field);
  }
});

test('with embeddings configured, ranking is hybrid: a passage is found by meaning when no word matches', async (t) => {
  const { key } = await hybrid.newUser();
  const before = embeddingCalls;
  const indexed = await index(hybrid, key, { document_id: 'garage', text: 'The red sedan needs new tyres before winter.' });
  t.true(indexed.embedded);
  await index(hybrid, key, { document_id: 'pets', text: 'The kitten sleeps on the warm windowsill all afternoon.' });
  await index(hybrid, key, { document_id: 'garden', text: 'Plant the tulip bulbs in autumn, six inches deep.' });
  t.true(embeddingCalls > before);

  // No document contains "automobile": full-text search alone finds nothing, the vectors do.
  const results = await query(hybrid, key, { query: 'automobile', top_k: 3 });
  t.is(results[0].document_id, 'garage');
  // A word match still ranks first when there is one.
  const tulips = await query(hybrid, key, { query: 'tulip bulbs', top_k: 3 });
  t.is(tulips[0].document_id, 'garden');
  // Fused scores are reciprocal-rank sums, not text ranks.
  t.true(tulips[0].score > 0 && tulips[0].score < 0.05);
  const other = await hybrid.newUser();
  t.deepEqual(await query(hybrid, other.key, { query: 'automobile' }), []);
});
