import { once } from 'node:events';
import { createServer, type RequestListener, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ExecutionContext } from 'ava';
import { Agent } from 'undici';

/** A loopback server with `handler` and an undici agent to reach it, both closed after the test. */
export async function servedOnLoopback(t: ExecutionContext, handler: RequestListener): Promise<{ origin: string; agent: Agent }> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const agent = new Agent();
  t.teardown(async () => {
    await agent.close();
    server.closeAllConnections();
    server.close();
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, agent };
}

/**
 * Answers `res` with `prefix` and then JSON array items without end, written as fast as the client
 * reads them, until the client lets go: an answer no byte limit may buffer whole. `written` counts
 * what went out; `closed` settles when the client let go.
 */
export function answerEndlessJson(res: ServerResponse, prefix: string, chunkBytes = 64 * 1024): { written: () => number; closed: Promise<unknown> } {
  let written = 0;
  const closed = once(res, 'close');
  res.writeHead(200, { 'content-type': 'application/json' });
  const chunk = Buffer.alloc(chunkBytes, '0,');
  const pump = () => {
    while (!res.destroyed && res.write(chunk)) written += chunk.length;
  };
  res.on('drain', pump);
  res.write(prefix);
  pump();
  return { written: () => written, closed };
}
