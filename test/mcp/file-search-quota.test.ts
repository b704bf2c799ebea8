import test from 'ava';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { startTestService, type TestService } from '../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';

// Indexed documents are bounded per user (FILE_SEARCH_MAX_DOCUMENTS_PER_USER, 3 here): a new
// document past it is an error result naming `arguments.document_id`, and nothing is stored;
// re-indexing one of the user's documents still works, and other users keep their own quota. New
// documents indexed at once cannot overshoot it. A user's documents and chunks go with the user.
// mcp-tools alone, called as the edge calls it.
let svc: TestService;
const MAX = 3;

test.before(async () => {
  svc = await startTestService(mcpToolsService, { env: { FILE_SEARCH_MAX_DOCUMENTS_PER_USER: String(MAX) } });
});
test.after.always(async () => {
  await svc?.close();
});

const knex = () => svc.runtime.db.knex;
const newUser = () => createTestUser(knex());
const count = async (table: string, userId: string) => Number((await knex()(table).where({ user_id: userId }).count<{ n: string }[]>({ n: '*' }))[0]!.n);

async function index(user: TestUser, documentId: string, text = `Notes about ${documentId} and the lighthouse.`) {
  const res = await fetch(`${svc.url}/v1/mcp`, {
    method: 'POST',
    headers: { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'file_search_index', arguments: { document_id: documentId, text } } }),
  });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${body}`);
  return JSON.parse(body).result as { isError?: boolean; content: Array<{ text: string }>; structuredContent?: { document_id: string } };
}

test('past the quota a new document is an error naming arguments.document_id; replacing one still works; another user is not held back', async (t) => {
  const user = await newUser();
  for (let n = 1; n <= MAX; n++) t.falsy((await index(user, `doc-${n}`)).isError);
  const over = await index(user, 'doc-extra');
  t.true(over.isError, JSON.stringify(over));
  t.regex(over.content[0]!.text, /'arguments\.document_id'/);
  t.regex(over.content[0]!.text, new RegExp(`${MAX} indexed documents.*FILE_SEARCH_MAX_DOCUMENTS_PER_USER`));
  t.is(await count('mcp_documents', user.id), MAX);
  t.is(await knex()('mcp_chunks').where({ user_id: user.id, document_id: 'doc-extra' }).first(), undefined, 'nothing of it stored');

  const replaced = await index(user, 'doc-2', 'The keeper rang the brass bell for thirty hours.');
  t.falsy(replaced.isError, JSON.stringify(replaced));
  t.is(await count('mcp_documents', user.id), MAX);

  const other = await newUser();
  t.falsy((await index(other, 'doc-extra')).isError);
});

test('new documents indexed at once never take the user past the quota', async (t) => {
  const user = await newUser();
  const results = await Promise.all(Array.from({ length: 8 }, (_, n) => index(user, `race-${n}`)));
  t.is(results.filter((r) => !r.isError).length, MAX, JSON.stringify(results.map((r) => r.content[0]!.text)));
  t.is(await count('mcp_documents', user.id), MAX);
});

test("deleting a user removes the user's documents and chunks, and nobody else's", async (t) => {
  const gone = await newUser();
  const stays = await newUser();
  t.falsy((await index(gone, 'diary')).isError);
  t.falsy((await index(stays, 'diary')).isError);
  t.is(await count('mcp_chunks', gone.id), 1);

  await knex()('users').where({ id: gone.id }).del();
  t.is(await count('mcp_documents', gone.id), 0);
  t.is(await count('mcp_chunks', gone.id), 0);
  t.is(await count('mcp_documents', stays.id), 1);
  t.is(await count('mcp_chunks', stays.id), 1);
});

test('a document of only whitespace is an error naming arguments.text: nothing is stored, the quota is untouched', async (t) => {
  const user = await newUser();
  for (const text of ['   ', ' \n\t\r\n ', '\u00a0\u2003\ufeff']) {
    // A client of a protocol version before 2025-11-25 (as here) gets argument errors as JSON-RPC errors.
    const res = await fetch(`${svc.url}/v1/mcp`, {
      method: 'POST',
      headers: { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'file_search_index', arguments: { document_id: 'blank', text } } }),
    });
    const body: any = await res.json();
    t.is(body.error?.code, -32602, JSON.stringify(body));
    t.regex(body.error.message, /arguments\.text/);
  }
  t.is(await count('mcp_documents', user.id), 0);
  t.is(await count('mcp_chunks', user.id), 0);
  // The whole quota is still there.
  for (let n = 1; n <= MAX; n++) t.falsy((await index(user, `after-blank-${n}`)).isError);
});
