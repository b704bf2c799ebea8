import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import test from 'ava';
import { ErrorCode, LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { systemClock, type Principal } from '../../services/kit/index.js';
import { createToolsPort } from '../../services/response-api/responses/ports.js';
import { waitFor } from '../helpers/wait.js';

// RESPONSES_TOOL_TIMEOUT_MS bounds a tool call from its start, connecting to mcp-tools included. An
// mcp-tools that answers `initialize` and then never answers the `notifications/initialized` POST
// (overloaded, or a proxy holding the request) left the call waiting without any bound of the MCP
// SDK (its request timeout covers `initialize` only) until fetch's own five-minute header timeout.
const principal: Principal = { userId: 'user_connect_timeout', subject: 'user_connect_timeout', email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false };

/** An MCP endpoint that answers `initialize` and holds every later request open without an answer. */
async function stalledAfterInitialize(t: import('ava').ExecutionContext) {
  const sockets = new Set<Socket>();
  const held: string[] = [];
  /** Held requests whose client has gone (the request was ended from its side). */
  const ended: string[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      const message = body ? JSON.parse(body) : {};
      if (message.method === 'initialize') {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: { tools: {} }, serverInfo: { name: 'stalled', version: '1' } } }));
        return;
      }
      const name = String(message.method ?? req.method);
      held.push(name);
      res.on('close', () => ended.push(name));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, held, ended };
}

test('a tool call whose connection to mcp-tools stalls after initialize ends at the tool timeout, as a timeout, and leaves no request open', async (t) => {
  const stalled = await stalledAfterInitialize(t);
  const tools = createToolsPort({ baseUrl: () => stalled.url, gatewayToken: 'token', clock: systemClock, listCacheMs: 0 });
  const session = await tools.open(principal, new AbortController().signal);
  // Long enough for `initialize` and the held POST to reach the endpoint on a loaded machine (at
  // 300 ms a busy CI run once timed out before the POST arrived); the assertions below need both.
  const error = await t.throwsAsync(session.call('python_exec', { code: 'print(1)' }, { signal: new AbortController().signal, timeoutMs: 3000 }));
  t.is((error as { code?: unknown }).code, ErrorCode.RequestTimeout);
  t.deepEqual(stalled.held, ['notifications/initialized'], 'the call never got past connecting');
  // The held request is ended from the client's side, not left to mcp-tools.
  await waitFor(() => stalled.ended.length === 1, 10_000, 'the held request ended');
  await session.close();
});
