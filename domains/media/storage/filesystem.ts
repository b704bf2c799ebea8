import { createHmac } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open as openFile, opendir, rename, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../../services/kit/core/index.js';
import { safeEqual, unixSeconds } from '../../../services/kit/core/index.js';
import { KEY_PATTERN, ObjectTooLargeError, type ObjectStorage, type SignedUrl, type UploadTarget } from './types.js';

/**
 * The embedded driver: objects are files under `<DATA_DIR>/media`, written atomically (temp file
 * then rename). Its URLs point at the public signed route (`/v1/media/signed/<key>`), carry an
 * expiry and an HMAC over everything the route will honour (method, key, expiry, content type,
 * file name, size), so the signature is the only credential and any change makes it invalid.
 */
export const SIGNED_PATH = '/v1/media/signed/';

export interface SignedParams {
  method: 'GET' | 'PUT';
  key: string;
  exp: number;
  ct: string;
  fn?: string;
  len?: number;
}

/** The query parameters of a signed URL (`sig` and what it covers). */
const SIGNED_FIELDS = ['exp', 'ct', 'fn', 'len', 'sig'] as const;

export function createUrlSigner(secret: Buffer) {
  const mac = (p: SignedParams) =>
    createHmac('sha256', secret).update([p.method, p.key, p.exp, p.ct, p.fn ?? '', p.len ?? ''].join('\n')).digest('base64url');
  return {
    sign: mac,
    query(p: SignedParams): string {
      const q = new URLSearchParams({ exp: String(p.exp), ct: p.ct });
      if (p.fn) q.set('fn', p.fn);
      if (p.len !== undefined) q.set('len', String(p.len));
      q.set('sig', mac(p));
      return q.toString();
    },
    /** Why the URL is refused, or null when its signature is intact and unexpired. */
    verify(method: 'GET' | 'PUT', key: string, query: Record<string, unknown>, nowSeconds: number): string | null {
      // A parameter given twice (`&fn=a&fn=b`) is parsed as a list: refused, not read as absent
      // (an unsigned `fn` list would pass as "no file name" and reach the route as a list).
      if (SIGNED_FIELDS.some((name) => query[name] !== undefined && typeof query[name] !== 'string')) return 'malformed signed URL';
      const str = (name: string) => (typeof query[name] === 'string' ? (query[name] as string) : undefined);
      const exp = Number(str('exp'));
      const ct = str('ct');
      const sig = str('sig');
      const lenRaw = str('len');
      if (!KEY_PATTERN.test(key) || !Number.isInteger(exp) || !ct || !sig) return 'malformed signed URL';
      const params: SignedParams = { method, key, exp, ct, fn: str('fn'), len: lenRaw === undefined ? undefined : Number(lenRaw) };
      if (!safeEqual(mac(params), sig)) return 'invalid signature';
      if (exp < nowSeconds) return 'the URL has expired';
      return null;
    },
  };
}

export type UrlSigner = ReturnType<typeof createUrlSigner>;

/**
 * How old (by modification time) a temporary file must be before it counts as left behind by a
 * crashed write. A write fills its temp file and renames it within moments; an hour is far beyond
 * any write in progress, including one of another process sharing DATA_DIR.
 */
export const STALE_TEMP_MS = 3_600_000;
/** `put`'s temporary name: the final path, a random suffix, `.tmp`. Nothing else is ever removed. */
const TEMP_NAME = /\.[0-9a-f]{12}\.tmp$/;
/**
 * Temporary files of the writes in progress in this process, by full path. Module-wide, not per
 * driver: one process may run media-api and the media-dedup worker, each with its own driver over
 * the same directory, and neither may remove the other's file however old its mtime looks.
 */
const writing = new Set<string>();

async function writeThenRename(temp: string, path: string, body: Buffer): Promise<void> {
  const handle = await openFile(temp, 'w');
  try {
    try {
      await handle.writeFile(body);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
  } catch (error) {
    // A failed write or rename leaves no half-written temporary file behind.
    await rm(temp, { force: true });
    throw error;
  }
}

/**
 * Removes the temporary files under `root` older than STALE_TEMP_MS that no write of this process
 * is using: what a process killed between creating and renaming its temp file left behind. Reads
 * the directories as streams (no list of every object in memory). The age is compared with the
 * wall clock, not the injectable one: modification times are written by the filesystem's clock.
 */
export async function removeStaleTemporaries(root: string): Promise<number> {
  const cutoff = Date.now() - STALE_TEMP_MS;
  let removed = 0;
  const visit = async (dir: string, depth: number): Promise<void> => {
    const entries = await opendir(dir).catch(() => null);
    if (!entries) return;
    for await (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        // objects/<2 hex>/… and uploads/…: nothing is deeper than that.
        if (depth < 2) await visit(path, depth + 1);
        continue;
      }
      if (!entry.isFile() || !TEMP_NAME.test(entry.name) || writing.has(path)) continue;
      const info = await stat(path).catch(() => null);
      if (!info || info.mtimeMs >= cutoff || writing.has(path)) continue;
      await rm(path, { force: true });
      removed++;
    }
  };
  await visit(root, 0);
  return removed;
}

export function createFilesystemStorage(options: { root: string; publicUrl: () => string; signer: UrlSigner; clock: Clock }): ObjectStorage {
  const { root, signer, clock } = options;
  const pathOf = (key: string) => {
    if (!KEY_PATTERN.test(key)) throw new Error(`invalid object key ${key}`);
    return join(root, key);
  };
  let lastTempWalk = -Infinity;
  const url = (p: Parameters<UrlSigner['sign']>[0]) => `${options.publicUrl().replace(/\/$/, '')}${SIGNED_PATH}${p.key}?${signer.query(p)}`;

  return {
    driver: 'filesystem',
    async put(key, body) {
      const path = pathOf(key);
      await mkdir(dirname(path), { recursive: true });
      const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
      writing.add(temp);
      try {
        await writeThenRename(temp, path, body);
      } finally {
        writing.delete(temp);
      }
    },
    async read(key, maxBytes) {
      const path = pathOf(key);
      const info = await stat(path).catch(() => null);
      if (!info) return null;
      if (info.size > maxBytes) throw new ObjectTooLargeError(maxBytes);
      const handle = await openFile(path, 'r');
      try {
        const buffer = Buffer.alloc(info.size);
        await handle.read(buffer, 0, info.size, 0);
        return buffer;
      } finally {
        await handle.close();
      }
    },
    async open(key) {
      const path = pathOf(key);
      const info = await stat(path).catch(() => null);
      if (!info) return null;
      return { body: createReadStream(path), size: info.size };
    },
    async delete(key) {
      await rm(pathOf(key), { force: true });
    },
    async size(key) {
      return (await stat(pathOf(key)).catch(() => null))?.size ?? null;
    },
    async exists(key) {
      return Boolean(await stat(pathOf(key)).catch(() => null));
    },
    // The sweep asks every minute; a walk of every object's directory is worth it a few times an
    // hour at most (nothing gets stale faster than STALE_TEMP_MS). The first call always walks.
    async removeStaleTemporaries() {
      if (Date.now() - lastTempWalk < STALE_TEMP_MS / 4) return 0;
      lastTempWalk = Date.now();
      return removeStaleTemporaries(root);
    },
    async downloadUrl(key, o): Promise<SignedUrl> {
      const exp = unixSeconds(clock) + o.expiresIn;
      return { url: url({ method: 'GET', key, exp, ct: o.contentType, fn: o.filename ?? undefined }), expiresAt: exp };
    },
    async uploadUrl(key, o): Promise<UploadTarget> {
      const exp = unixSeconds(clock) + o.expiresIn;
      return {
        url: url({ method: 'PUT', key, exp, ct: o.contentType, len: o.bytes }),
        expiresAt: exp,
        method: 'PUT',
        headers: { 'content-type': o.contentType, 'content-length': String(o.bytes) },
      };
    },
    async close() {},
  };
}
