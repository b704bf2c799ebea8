import { once } from 'node:events';
import { createServer, type RequestListener } from 'node:http';
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
