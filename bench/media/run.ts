/**
 * Media benchmark (not a test): `node --import tsx bench/media/run.ts` (needs the test servers:
 * PostgreSQL, RabbitMQ). The platform runs in a child process (bench/media/platform-server.ts), so
 * its RSS is measured without the client's. Prints:
 *  1. uploads per second of a 1 MiB JPEG through the edge, as base64 JSON and as multipart;
 *  2. peak RSS growth of the platform process per concurrent upload, at 1, 8 and 32 uploads in
 *     flight (bounded: bodies are capped at MEDIA_MAX_BYTES and decodes are limited to
 *     MEDIA_PROCESSING_CONCURRENCY at once, so growth per upload falls as concurrency rises);
 *  3. resolve latency p50/p99 for a payload with 10 references.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import sharp from 'sharp';

const MiB = 1024 * 1024;

/** A platform child process; each measurement series gets a fresh one (RSS is not given back). */
async function startPlatform() {
  const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/media/platform-server.ts'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, NODE_ENV: 'test' },
  });
  const lines = createInterface({ input: child.stdout! });
  const waiting: Array<(line: string) => void> = [];
  lines.on('line', (line) => waiting.shift()?.(line));
  const nextLine = () => new Promise<string>((resolve) => waiting.push(resolve));
  const { edge } = JSON.parse(await nextLine()) as { edge: string };
  const login = (await (await fetch(`${edge}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string };
  return {
    edge,
    auth: { authorization: `Bearer ${login.access_token}` },
    async command(cmd: string) {
      const reply = nextLine();
      child.stdin!.write(`${cmd}\n`);
      return JSON.parse(await reply);
    },
    stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.stdin!.end();
      child.kill('SIGTERM');
      return exited;
    },
  };
}
type Platform = Awaited<ReturnType<typeof startPlatform>>;
let platform: Platform;

/** Distinct ~1 MiB JPEGs (noise, so each has its own hash and none dedups). */
async function jpegs(count: number): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const w = 1280;
    const h = 1000;
    out.push(await sharp(randomBytes(w * h * 3), { raw: { width: w, height: h, channels: 3 } }).jpeg({ quality: 88 }).toBuffer());
  }
  return out;
}

async function uploadBase64(bytes: Buffer): Promise<number> {
  const res = await fetch(`${platform.edge}/v1/media/upload`, {
    method: 'POST',
    headers: { ...platform.auth, 'content-type': 'application/json' },
    body: JSON.stringify({ source: { type: 'base64', data: bytes.toString('base64') } }),
  });
  await res.arrayBuffer();
  return res.status;
}

async function uploadMultipart(bytes: Buffer): Promise<number> {
  const form = new FormData();
  form.append('file', new Blob([bytes], { type: 'image/jpeg' }), 'bench.jpg');
  const res = await fetch(`${platform.edge}/v1/media/upload`, { method: 'POST', headers: platform.auth, body: form });
  await res.arrayBuffer();
  return res.status;
}

/** Runs `total` uploads with `concurrency` in flight; returns uploads per second. */
async function throughput(images: Buffer[], kind: (b: Buffer) => Promise<number>, total: number, concurrency: number): Promise<number> {
  let next = 0;
  let failed = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const status = await kind(images[i % images.length]!);
        if (status !== 201 && status !== 200) failed++;
      }
    }),
  );
  if (failed) throw new Error(`${failed} uploads failed`);
  return total / ((performance.now() - started) / 1000);
}

/** Peak RSS growth over the baseline taken after one warm-up upload, at each level of uploads in flight. */
async function rssSeries(name: string, images: Buffer[], kind: (b: Buffer) => Promise<number>) {
  platform = await startPlatform();
  try {
    await kind(images[0]!);
    await platform.command('reset');
    let offset = 1;
    for (const inFlight of [1, 8, 32]) {
      await Promise.all(Array.from({ length: inFlight }, (_, i) => kind(images[(offset + i) % images.length]!)));
      offset += inFlight;
      const { baseline, peak } = await platform.command('peak');
      const growth = (peak - baseline) / MiB;
      console.log(`peak RSS growth ${name.padEnd(11)} ${String(inFlight).padStart(2)} in flight: ${growth.toFixed(1)} MiB over the warm baseline (${(baseline / MiB).toFixed(0)} MiB), ${(growth / inFlight).toFixed(2)} MiB per upload`);
    }
  } finally {
    await platform.stop();
  }
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

const images = await jpegs(16);
const avg = images.reduce((s, b) => s + b.length, 0) / images.length / MiB;
console.log(`# media bench on ${(await import('node:os')).cpus().length} cores, Node ${process.version}; JPEG ${avg.toFixed(2)} MiB (noise, 1280 × 1000)`);

for (const [name, kind] of [['multipart', uploadMultipart], ['base64 JSON', uploadBase64]] as const) await rssSeries(name, images, kind);

platform = await startPlatform();
try {
  // Warm-up (JIT, connections, sharp's thread pool).
  await throughput(images, uploadBase64, 8, 2);
  for (const [name, kind] of [['base64 JSON', uploadBase64], ['multipart', uploadMultipart]] as const) {
    for (const concurrency of [1, 4]) {
      const rate = await throughput(images, kind, 40, concurrency);
      console.log(`uploads/s  ${name.padEnd(11)} concurrency ${concurrency}: ${rate.toFixed(1)}`);
    }
  }
  // resolve: a chat payload with 10 references.
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) {
    const small = await sharp({ create: { width: 8, height: 8, channels: 3, background: { r: i * 20, g: 10, b: 10 } } }).png().toBuffer();
    const res = await fetch(`${platform.edge}/v1/media/upload`, { method: 'POST', headers: { ...platform.auth, 'content-type': 'application/json' }, body: JSON.stringify({ source: { type: 'base64', data: small.toString('base64') } }) });
    ids.push(((await res.json()) as { id: string }).id);
  }
  const payload = { model: 'm', messages: [{ role: 'user', content: ids.map((id) => ({ type: 'image_url', image_url: { url: id } })) }] };
  const body = JSON.stringify({ payload });
  const latencies: number[] = [];
  for (let i = 0; i < 400; i++) {
    const t0 = performance.now();
    const res = await fetch(`${platform.edge}/v1/media/resolve`, { method: 'POST', headers: { ...platform.auth, 'content-type': 'application/json' }, body });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`resolve ${res.status}`);
    if (i >= 50) latencies.push(performance.now() - t0);
  }
  latencies.sort((a, b) => a - b);
  console.log(`resolve, 10 references (through the edge, ${latencies.length} sequential calls): p50 ${pct(latencies, 50).toFixed(2)} ms, p99 ${pct(latencies, 99).toFixed(2)} ms`);
} finally {
  await platform.stop();
}
