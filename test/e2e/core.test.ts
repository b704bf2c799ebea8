import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { freePort } from '../helpers/process.js';
import { createTestUser } from '../helpers/users.js';
import { registerE2eCore } from './core-suite.js';

// The end-to-end core (./core-suite.ts) against the single-process platform; the cluster suite
// (test/reliability/cluster.test.ts) runs the same cases through each of its two edges.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const MODEL = 'core-model';
let p: TestPlatform;
let fake: FakeUpstream;
let dataDir: string;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'core', models: [{ id: MODEL }] });
  dataDir = await mkdtemp(join(tmpdir(), 'e2e-core-'));
  // Signed media URLs point at the edge (MEDIA_PUBLIC_URL), so its port is chosen first.
  const port = await freePort();
  p = await startTestPlatform({
    env: {
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      LLM_HEALTH_PROBE_INTERVAL_MS: '0',
      DATA_DIR: dataDir,
      GATEWAY_PORT: String(port),
      MEDIA_PUBLIC_URL: `http://127.0.0.1:${port}`,
    },
  });
  await keyClient(p, ADMIN_KEY).post('/admin/providers', { body: { name: 'Core', vendor: 'fake', base_url: fake.url } });
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

registerE2eCore('single process', () => ({
  url: p.url,
  model: MODEL,
  upstreamName: fake.name,
  async newKey() {
    const user = await createTestUser(p.runtime.db.knex);
    const created = (await keyClient(p, ADMIN_KEY).post('/admin/api-keys', { body: { user_id: user.id, name: 'e2e-core', tier: 'pro' } })) as { key: string };
    return created.key;
  },
}));
