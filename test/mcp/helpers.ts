import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Logger } from '../../services/kit/index.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { createTestUser, type TestUser } from '../helpers/users.js';

/**
 * The whole platform behind the embedded edge for the MCP tests, with an admin API key (the
 * operator's bootstrap key) to mint keys for ordinary test users. The bound on python_exec runs in
 * flight is raised out of the way (16), as the edge's limits are: a file's tests run at once, and
 * past the default of 4 a run is answered "busy" by design. A test of that bound sets its own.
 */
export interface McpPlatform extends TestPlatform {
  adminKey: string;
  /** A new ordinary user and an API key of theirs. */
  newUser(options?: { admin?: boolean }): Promise<{ user: TestUser; key: string }>;
  /** The official MCP SDK client, connected through the edge with `key`. */
  client(key: string): Promise<Client>;
  /** A plain JSON-RPC POST to /v1/mcp through the edge. */
  rpc(key: string, body: unknown, headers?: Record<string, string>): Promise<{ status: number; headers: Headers; json: any; text: string }>;
  api(key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
}

export async function startMcpPlatform(env: Record<string, string | undefined> = {}, options: { logger?: Logger } = {}): Promise<McpPlatform> {
  const adminKey = `sk_${randomBase62(32)}`;
  const p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey, MCP_MAX_CONCURRENT_PYTHON: '16', ...env }, logger: options.logger });
  const clients: Client[] = [];
  const api = async (key: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${p.url}${path}`, {
      method,
      headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
  return {
    ...p,
    adminKey,
    api,
    async newUser(options = {}) {
      const user = await createTestUser(p.runtime.db.knex, options);
      const created = await api(adminKey, 'POST', '/v1/admin/api-keys', { user_id: user.id, name: 'mcp-test', tier: 'pro' });
      if (created.status !== 201) throw new Error(`api key create: ${created.status} ${JSON.stringify(created.json)}`);
      return { user, key: created.json.key as string };
    },
    async client(key) {
      const client = new Client({ name: 'mcp-test', version: '1.0.0' });
      const transport = new StreamableHTTPClientTransport(new URL(`${p.url}/v1/mcp`), { requestInit: { headers: { 'x-api-key': key } } });
      await client.connect(transport);
      clients.push(client);
      return client;
    },
    async rpc(key, body, headers = {}) {
      const res = await fetch(`${p.url}/v1/mcp`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json', accept: 'application/json', ...headers },
        body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
      });
      const text = await res.text();
      let json: unknown = null;
      try {
        json = JSON.parse(text);
      } catch {}
      return { status: res.status, headers: res.headers, json, text };
    },
    async stop() {
      for (const client of clients) await client.close().catch(() => {});
      await p.stop();
    },
  };
}

/** A local web site for scrape: `routes` maps a path to a reply. */
export type SiteReply = { status?: number; type?: string; body?: string | Buffer; headers?: Record<string, string> };

export async function startSite(routes: Record<string, SiteReply | ((port: number) => SiteReply)>) {
  const server = http.createServer((req, res) => {
    const entry = routes[(req.url ?? '/').split('?')[0]!];
    if (!entry) return res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    const reply = typeof entry === 'function' ? entry(port) : entry;
    res.writeHead(reply.status ?? 200, { ...(reply.type ? { 'content-type': reply.type } : {}), ...reply.headers }).end(reply.body ?? '');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export const ARTICLE_HTML = `<!doctype html><html><head><title>Otters of the Pacific</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article>
<h1>Otters of the Pacific</h1>
<p>Sea otters hold hands while they sleep so that they do not drift apart. This behaviour is called rafting,
and groups of otters resting together can number in the hundreds along the kelp forests of the Pacific coast.</p>
<p>They use stones as tools to crack open shellfish, one of the few mammals other than primates known to do so.
A single otter may keep a favourite stone in a pouch of loose skin under its forearm for years.</p>
<h2>Diet</h2>
<ul><li>Sea urchins</li><li>Crabs</li><li>Clams</li></ul>
<p>Read more at <a href="/more">the otter page</a>.</p>
</article>
<script>window.secret = "never in the output";</script>
<footer>Copyright footer text</footer>
</body></html>`;
