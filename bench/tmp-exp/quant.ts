import { createRequire } from 'node:module';
import { readFile } from 'node:fs/promises';
import { chatBody } from '../lib/load.js';
import { startPlatform, startUpstream } from '../lib/procs.js';
const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;
const mode = (process.argv[2] ?? 'embedded') as 'embedded' | 'production';
const conns = Number(process.argv[3] ?? 64);
const upstream = await startUpstream();
const platform = await startPlatform(mode);
await platform.addProviders(upstream, [20]);
const quant = async () => {
  const text = await (await fetch(`${platform.llmUrl}/metrics`)).text();
  return [...text.matchAll(/^nodejs_eventloop_delay_seconds\{quantile="([^"]+)"\} (\S+)$/gm)].map((m) => `${m[1]}:${(Number(m[2]) * 1000).toFixed(2)}`).join(' ');
};
const cpu = async () => Number((await readFile(`/proc/${platform.pid}/task/${platform.pid}/stat`, 'utf8')).split(') ')[1]!.split(' ').slice(11, 13).reduce((a, b) => a + Number(b), 0)) * 10;
try {
  for (let i = 0; i < 5; i++) {
    for (const stream of [false, true]) {
      await quant();
      const c0 = await cpu();
      const r = await autocannon({ url: `${platform.edgeUrl}/v1/chat/completions`, method: 'POST', connections: conns, duration: 5, headers: { 'content-type': 'application/json', 'x-api-key': platform.adminKey }, body: chatBody('bench-d20', stream) });
      const c1 = await cpu();
      console.log(`${stream ? 'stream' : 'json  '} ${r.requests.average} req/s cpu/req ${((c1 - c0) / r.requests.total).toFixed(3)} ms  loop ${await quant()}`);
    }
  }
} finally {
  await platform.stop(); await upstream.stop();
  process.exit(0);
}
