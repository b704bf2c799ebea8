import test from 'ava';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { ApiError, readJsonBody, readRawBody } from '../../services/kit/index.js';
import { servedOnLoopback } from '../helpers/loopback-server.js';

/** A server that answers what the kit's reader made of the body: its bytes, or the ApiError's status and message. */
function answerWith(read: (req: IncomingMessage) => Promise<unknown>) {
  return (req: IncomingMessage, res: ServerResponse) => {
    read(req).then(
      (value) => res.end(JSON.stringify({ value: Buffer.isBuffer(value) ? value.toString('utf8') : value })),
      (error: unknown) => {
        const known = error instanceof ApiError;
        res.statusCode = known ? error.status : 500;
        res.end(JSON.stringify({ message: (error as Error).message, param: known ? error.param : undefined }));
      },
    );
  };
}

async function post(origin: string, agent: unknown, body: string | AsyncIterable<Buffer>, headers: Record<string, string> = {}) {
  const res = await request(`${origin}/`, { method: 'POST', body: typeof body === 'string' ? body : Readable.from(body), headers: { 'content-type': 'application/json', ...headers }, dispatcher: agent as never });
  return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown> };
}

/** A body sent chunked (no Content-Length), so only the count while reading can stop it. */
async function* chunked(parts: number, size: number): AsyncIterable<Buffer> {
  for (let i = 0; i < parts; i++) yield Buffer.alloc(size, 'a');
}

test('readRawBody returns the bytes under the limit, refuses a declared length over it, and counts a chunked body while reading', async (t) => {
  const { origin, agent } = await servedOnLoopback(t, answerWith((req) => readRawBody(req, 100)));
  t.deepEqual(await post(origin, agent, '{"a":1}'), { status: 200, json: { value: '{"a":1}' } });

  const declared = await post(origin, agent, 'x'.repeat(101));
  t.is(declared.status, 413);
  t.deepEqual(declared.json, { message: 'Request body exceeds the limit of 100 bytes for this route', param: 'body' });

  const streamed = await post(origin, agent, chunked(5, 40));
  t.is(streamed.status, 413);
  t.is(streamed.json.param, 'body');

  // The connection is still good for the next request: the oversized body was drained, not left half-read.
  t.deepEqual(await post(origin, agent, chunked(2, 40)), { status: 200, json: { value: 'a'.repeat(80) } });
});

test('readJsonBody reads through the same cap: 413 in the same words, then parses what fits', async (t) => {
  const { origin, agent } = await servedOnLoopback(t, answerWith((req) => readJsonBody(req, { limit: 100 })));
  const streamed = await post(origin, agent, chunked(3, 50));
  t.is(streamed.status, 413);
  t.is(streamed.json.message, 'Request body exceeds the limit of 100 bytes for this route');
  t.deepEqual(await post(origin, agent, '{"model":"m","n":2}'), { status: 200, json: { value: { model: 'm', n: 2 } } });
  const malformed = await post(origin, agent, '{"model":');
  t.is(malformed.status, 400);
});
