import { readFileSync, readdirSync } from 'node:fs';
import { startPlatform, startUpstream } from './lib/procs.js';
const threads = (pid: number) => Object.fromEntries(readdirSync(`/proc/${pid}/task`).map((t) => { const raw = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8'); const f = raw.split(') ')[1]!.split(' '); return [t, (Number(f[11]) + Number(f[12])) * 10]; }));
const upstream = await startUpstream();
for (const mode of ['embedded', 'production'] as const) {
  const p = await startPlatform(mode, JSON.parse(process.env.ENV ?? '{}'));
  await p.addProviders(upstream, [0]);
  await new Promise((r) => setTimeout(r, 5000));
  const t0 = threads(p.pid);
  await new Promise((r) => setTimeout(r, 10000));
  const t1 = threads(p.pid);
  const d = Object.entries(t1).map(([k, v]) => [k, v - (t0[k] ?? 0)] as const).filter(([, v]) => v > 0);
  console.log(mode, 'idle ms/s:', (d.reduce((s, [, v]) => s + v, 0) / 10).toFixed(1), d.map(([k, v]) => `${k === String(p.pid) ? 'main' : k}=${(v / 10).toFixed(1)}`).join(' '));
  await p.stop();
}
await upstream.stop();
