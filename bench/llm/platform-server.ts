// Child process: the whole platform (edge + services) on the test servers, with the bench provider
// registered (background pollers at their production defaults, not the tests' 20 ms). Prints {"edge","llm","gatewaySecret","adminKey"} once ready.
import { randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform } from '../../test/helpers/platform.js';

const fakeUrl = process.argv[2]!;
const adminKey = `sk_${randomBase62(32)}`;
const p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey, LOG_LEVEL: 'silent', LLM_HEALTH_PROBE_INTERVAL_MS: '0', DATABASE_POOL_MAX: '10', OUTBOX_POLL_MS: '500', BUS_POLL_MS: '250',
  // Every bench connection comes from 127.0.0.1 and the throughput step sends ~50 000 requests a
  // minute: the per-address connection guard and the tier limits would answer the streams step 429/503.
  EDGE_MAX_CONNECTIONS_PER_ADDRESS: '100000',
  EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS: '100000',
  EDGE_RATE_LIMIT_IP_PER_MINUTE: '100000000',
  EDGE_RATE_LIMIT_PRO_PER_MINUTE: '100000000',
  EDGE_RATE_LIMIT_PRO_PER_DAY: '100000000',
} });
const res = await fetch(`${p.url}/v1/admin/providers`, {
  method: 'POST',
  headers: { 'x-api-key': adminKey, 'content-type': 'application/json' },
  body: JSON.stringify({ name: 'Bench', vendor: 'fake', base_url: fakeUrl }),
});
if (res.status !== 201) throw new Error(`register failed: ${res.status} ${await res.text()}`);
const admin = await p.runtime.db.knex('users').where({ is_admin: true }).first();
process.stdout.write(`${JSON.stringify({ edge: p.url, llm: p.serviceUrl('llm-api'), gatewaySecret: p.gatewaySecret, adminKey, adminId: admin.id })}\n`);
process.on('SIGTERM', () => void p.stop().then(() => process.exit(0)));
