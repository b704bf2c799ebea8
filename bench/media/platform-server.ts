// Child process of bench/media/run.ts: the whole platform (edge + services) on the test servers,
// media on the filesystem driver under a temporary DATA_DIR. Prints {"edge"} once ready, then
// samples its own RSS every 5 ms; stdin commands: `reset` (baseline := current RSS, peak := current)
// and `peak` (prints {"baseline","peak"} in bytes).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startTestPlatform } from '../../test/helpers/platform.js';

const dataDir = await mkdtemp(join(tmpdir(), 'media-bench-'));
const p = await startTestPlatform({
  env: { DATA_DIR: dataDir, LOG_LEVEL: 'silent', MEDIA_QUOTA_BYTES_PER_USER: '0', MEDIA_PUBLIC_URL: 'http://127.0.0.1:1', OUTBOX_POLL_MS: '500', BUS_POLL_MS: '250', DATABASE_POOL_MAX: '10' },
});
let baseline = process.memoryUsage.rss();
let peak = baseline;
const sampler = setInterval(() => {
  const rss = process.memoryUsage.rss();
  if (rss > peak) peak = rss;
}, 5);
process.stdout.write(`${JSON.stringify({ edge: p.url })}\n`);
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'reset') {
    global.gc?.();
    baseline = process.memoryUsage.rss();
    peak = baseline;
    process.stdout.write(`${JSON.stringify({ ok: true })}\n`);
  } else if (line === 'peak') {
    process.stdout.write(`${JSON.stringify({ baseline, peak })}\n`);
  }
});
const stop = () => {
  clearInterval(sampler);
  void p.stop().then(() => rm(dataDir, { recursive: true, force: true })).then(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.stdin.on('end', stop);
