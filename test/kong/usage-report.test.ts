import { readFileSync } from 'node:fs';
import test from 'ava';
import { dumpAllPlugins } from './harness.js';

// Why Kong's access line has no token counts for a streamed chat answer while the embedded edge's
// has them (kong/README.md, "Token counts on Kong"): the counts arrive with the stream's last event
// (an HTTP trailer on the embedded edge), and a plugin served by kong-pdk's plugin server has no
// phase that sees a streamed body go by. Checked against the real plugin server, so the README
// has to change if a kong-pdk upgrade adds such a phase.

test('kong-pdk calls no header_filter or body_filter: only access/rewrite/log, and response (which buffers)', (t) => {
  const dump = dumpAllPlugins(new URL('./fixtures/filters', import.meta.url).pathname);
  t.is(dump.status, 0, dump.stdout);
  const [plugin] = JSON.parse(dump.stdout) as Array<{ Name: string; Phases: string[] }>;
  t.is(plugin!.Name, 'filters');
  t.deepEqual([...plugin!.Phases].sort(), ['log', 'response']);
});

test('kong/README.md states the limitation, why, and where the counts are instead', (t) => {
  const readme = readFileSync('kong/README.md', 'utf8');
  const section = readme.slice(readme.indexOf('## Token counts on Kong'));
  t.true(section.startsWith('## Token counts on Kong'), 'the section exists');
  for (const fact of ['body_filter', 'response', 'trailer', 'log phase', 'X-Usage-Report', 'GET /v1/admin/requests', 'request_id', 'test/kong/usage-report.test.ts']) {
    t.true(section.includes(fact), `the section mentions ${fact}`);
  }
});
