import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { freePort } from '../../scripts/free-port.mjs';

/**
 * The whole platform behind the embedded edge, with media stored on the filesystem driver under a
 * temporary DATA_DIR. The edge's port is chosen before start so that the signed URLs media-api
 * writes (MEDIA_PUBLIC_URL) point at it, as an operator would configure the public address.
 */
export interface MediaPlatform extends TestPlatform {
  dataDir: string;
  /** A fresh guest user's bearer headers (each call: a new user). */
  newUser(): Promise<{ headers: Record<string, string>; userId: string }>;
}

export { freePort };

export async function startMediaPlatform(env: Record<string, string | undefined> = {}, options: { clock?: Clock } = {}): Promise<MediaPlatform> {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-test-'));
  const port = await freePort();
  const p = await startTestPlatform({
    env: { DATA_DIR: dataDir, GATEWAY_PORT: String(port), MEDIA_PUBLIC_URL: `http://127.0.0.1:${port}`, ...env },
    clock: options.clock,
  });
  const stopPlatform = p.stop.bind(p);
  return Object.assign(p, {
    dataDir,
    async newUser() {
      const res = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
      if (res.status >= 300) throw new Error(`guest login failed: ${res.status} ${await res.text()}`);
      const body = (await res.json()) as { access_token: string; user_id?: string };
      const headers = { authorization: `Bearer ${body.access_token}` };
      return { headers, userId: body.user_id ?? '' };
    },
    async stop() {
      await stopPlatform();
      await rm(dataDir, { recursive: true, force: true });
    },
  });
}

/** JSON POST helper. */
export async function postJson(url: string, headers: Record<string, string>, body: unknown) {
  const res = await fetch(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, body: json, headers: res.headers };
}
