import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { pino } from 'pino';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// A user deleted (their `users` row removed) while their file_search_index call was in flight got
// "failed unexpectedly" and an error in the log: the document's insert hit its foreign key to
// `users`. The deletion happens at a fixed point of the call: the embeddings endpoint (called after
// the identity check and before the document is stored) deletes the user before it answers.
let p: McpPlatform;
let embeddings: http.Server;
const lines: Array<{ level: number; msg: string; [key: string]: unknown }> = [];
/** The user the embeddings endpoint deletes before answering its next request. */
let deleteOnEmbed: string | null = null;

test.before(async () => {
  embeddings = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', async () => {
      const body = JSON.parse(raw) as { input: string[] };
      if (deleteOnEmbed) {
        await p.runtime.db.knex('users').where({ id: deleteOnEmbed }).delete();
        deleteOnEmbed = null;
      }
      const data = body.input.map((_text, index) => ({ object: 'embedding', index, embedding: [1, 0, 0, 0] }));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data }));
    });
  });
  await new Promise<void>((resolve) => embeddings.listen(0, '127.0.0.1', resolve));
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  p = await startMcpPlatform({ EMBEDDINGS_URL: `http://127.0.0.1:${(embeddings.address() as AddressInfo).port}/v1` }, { logger });
});
test.after.always(async () => {
  await p?.stop();
  embeddings?.closeAllConnections();
  await new Promise<void>((resolve) => embeddings?.close(() => resolve()));
});

test('a user deleted while file_search_index runs gets an error result saying the user no longer exists, and no error is logged', async (t) => {
  const { user, key } = await p.newUser();
  const client = await p.client(key);
  // The user exists as the call starts (and has a document, which goes with the user).
  t.falsy(((await client.callTool({ name: 'file_search_index', arguments: { document_id: 'kept', text: 'Before the account went away.' } })) as any).isError);
  deleteOnEmbed = user.id;
  const from = lines.length;
  const result: any = await client.callTool({ name: 'file_search_index', arguments: { document_id: 'late', text: 'Indexed as the account is removed.' } });
  t.true(result.isError);
  t.regex(result.content[0].text, /no longer exists/);
  t.notRegex(result.content[0].text, /unexpectedly/);
  t.is(deleteOnEmbed as string | null, null, 'the user was deleted during the call');
  t.is(await p.runtime.db.knex('mcp_documents').where({ user_id: user.id }).first(), undefined);
  const logged = lines.slice(from);
  t.deepEqual(logged.filter((line) => line.level >= 50), [], 'nothing logged as an error');
  const callLine = logged.find((line) => line.msg === 'mcp tool call' && line.user_id === user.id);
  t.like(callLine, { tool: 'file_search_index', outcome: 'error' });
});
