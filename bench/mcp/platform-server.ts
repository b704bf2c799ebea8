// Child process: the whole platform (edge + services) on the test servers, with an ordinary user
// holding an API key, and a local web page for scrape (127.0.0.1 allowed). Prints one JSON line
// {"edge","mcp","gatewaySecret","key","userId","page"} once ready.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform } from '../../test/helpers/platform.js';
import { createTestUser } from '../../test/helpers/users.js';
import { ARTICLE_HTML } from '../../test/mcp/helpers.js';

const site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(ARTICLE_HTML));
await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
const page = `http://127.0.0.1:${(site.address() as AddressInfo).port}/article`;

const adminKey = `sk_${randomBase62(32)}`;
const p = await startTestPlatform({
  env: {
    BOOTSTRAP_ADMIN_API_KEY: adminKey,
    LOG_LEVEL: 'silent',
    EGRESS_ALLOW_HOSTS: '127.0.0.1',
    DATABASE_POOL_MAX: '10',
    OUTBOX_POLL_MS: '500',
    BUS_POLL_MS: '250',
    MCP_MAX_CONCURRENT_PYTHON: '4',
  },
});
const user = await createTestUser(p.runtime.db.knex);
const res = await fetch(`${p.url}/v1/admin/api-keys`, {
  method: 'POST',
  headers: { 'x-api-key': adminKey, 'content-type': 'application/json' },
  body: JSON.stringify({ user_id: user.id, name: 'bench', tier: 'pro' }),
});
if (res.status !== 201) throw new Error(`api key create failed: ${res.status} ${await res.text()}`);
const { key } = (await res.json()) as { key: string };
process.stdout.write(`${JSON.stringify({ edge: p.url, mcp: p.serviceUrl('mcp-tools'), gatewaySecret: p.gatewaySecret, key, user, page })}\n`);
process.on('SIGTERM', () => void p.stop().then(() => site.close(() => process.exit(0))));
