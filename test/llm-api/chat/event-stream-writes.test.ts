import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import test from 'ava';
import type { Response } from 'express';
import { request } from 'undici';
import { ClientClosed } from '../../../services/kit/index.js';
import { writeEventStream } from '../../../services/llm-api/chat/routes.js';
import type { StreamEvent } from '../../../services/llm-api/chat/stream.js';
import { startRelay } from '../../helpers/relay.js';

// How a streamed answer reaches the socket: the head and the first event in one write when the
// event is ready, the head alone (at once) when it is not; and nothing at all when the response
// was answered already.

const chunk = (n: number) => ({ type: 'chunk', chunk: { id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `t${n}` } }] } }) as unknown as StreamEvent;

/** A server whose one route writes `events` with writeEventStream, counting the socket's writes. */
async function serve(events: () => AsyncIterable<StreamEvent>) {
  const writes: string[] = [];
  const server: Server = createServer((_req, res) => {
    const socket = res.socket as unknown as {
      _write: (data: Buffer, ...rest: unknown[]) => unknown;
      _writev?: (chunks: Array<{ chunk: Buffer }>, ...rest: unknown[]) => unknown;
    };
    const write = socket._write.bind(socket);
    const writev = socket._writev?.bind(socket);
    socket._write = (data: Buffer, ...rest: unknown[]) => {
      writes.push(data.toString());
      return write(data, ...rest);
    };
    if (writev) {
      socket._writev = (chunks: Array<{ chunk: Buffer }>, ...rest: unknown[]) => {
        writes.push(chunks.map((c) => c.chunk.toString()).join(''));
        return writev(chunks, ...rest);
      };
    }
    void writeEventStream(res as ServerResponse as Response, events(), 0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return { url, writes, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

test('a first event that is ready leaves with the head in one write', async (t) => {
  const s = await serve(async function* () {
    yield chunk(1);
    yield chunk(2);
    yield { type: 'done' } as StreamEvent;
  });
  try {
    const res = await request(s.url);
    const body = await res.body.text();
    t.is(res.statusCode, 200);
    t.true(body.includes('t1') && body.includes('t2') && body.endsWith('data: [DONE]\n\n'));
    const first = s.writes[0]!;
    t.true(first.startsWith('HTTP/1.1 200'), 'the first write starts with the head');
    t.true(first.includes('t1'), 'and carries the first event');
  } finally {
    await s.close();
  }
});

test('when no event is ready the head goes alone at once, and the events follow', async (t) => {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const s = await serve(async function* () {
    await released;
    yield chunk(1);
    yield { type: 'done' } as StreamEvent;
  });
  try {
    // The head arrives while the events are still held back.
    const res = await request(s.url);
    t.is(res.statusCode, 200);
    t.is(res.headers['content-type'], 'text/event-stream; charset=utf-8');
    t.true(s.writes[0]!.startsWith('HTTP/1.1 200'));
    t.false(s.writes[0]!.includes('t1'));
    release();
    const body = await res.body.text();
    t.true(body.includes('t1') && body.endsWith('data: [DONE]\n\n'));
  } finally {
    await s.close();
  }
});

test("a provider answer that arrives whole leaves in one write, ending at the provider's [DONE] without waiting for its body to end", async (t) => {
  const data = (content: string) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content } }] })}\n\n`;
  const answer = `${data('one')}${data('two')}data: [DONE]\n\n`;
  // The provider's body stays open after [DONE]: the client's stream must not wait for it.
  const providerBody = new PassThrough();
  let relayed!: ReturnType<typeof startRelay>;
  const s = await serve(() => {
    relayed = startRelay(answer, providerBody);
    return relayed.events;
  });
  try {
    const res = await request(s.url);
    const body = await res.body.text();
    t.true(body.includes('one') && body.includes('two') && body.endsWith('data: [DONE]\n\n'));
    t.is(body.match(/\[DONE\]/g)!.length, 1);
    t.is(s.writes.length, 1, `head, events, [DONE] and the end in one write, not ${s.writes.length}`);
    t.is((await relayed.done).outcome, 'ok');
    t.false(providerBody.destroyed, 'the provider body is left to finish, so its connection can be reused');
    providerBody.end();
  } finally {
    await s.close();
  }
});

test('a response answered already (the embedded edge gave up with its 504): nothing is written, nothing thrown, and the relay releases its provider and settles', async (t) => {
  const data = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'late' } }] })}\n\n`;
  const providerBody = new PassThrough();
  const client = new AbortController();
  client.abort(new ClientClosed());
  const relayed = startRelay(data, providerBody, { signal: client.signal });
  let wrote: Promise<void> | undefined;
  const server = createServer((_req, res) => {
    res.writeHead(504, { 'content-type': 'application/json' });
    res.end('{"error":{"code":"upstream_timeout"}}');
    wrote = writeEventStream(res as ServerResponse as Response, relayed.events, 0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    t.is(res.statusCode, 504);
    t.is(await res.body.text(), '{"error":{"code":"upstream_timeout"}}');
    await t.notThrowsAsync(wrote!);
    t.is((await relayed.done).outcome, 'client_closed');
    t.true(providerBody.destroyed, "the provider's answer is cut");
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
