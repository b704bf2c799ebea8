import { createHmac } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open as openFile, rename, rm, stat } from 'node:fs/promises';
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

export function createFilesystemStorage(options: { root: string; publicUrl: () => string; signer: UrlSigner; clock: Clock }): ObjectStorage {
  const { root, signer, clock } = options;
  const pathOf = (key: string) => {
    if (!KEY_PATTERN.test(key)) throw new Error(`invalid object key ${key}`);
    return join(root, key);
  };
  const url = (p: Parameters<UrlSigner['sign']>[0]) => `${options.publicUrl().replace(/\/$/, '')}${SIGNED_PATH}${p.key}?${signer.query(p)}`;

  return {
    driver: 'filesystem',
    async put(key, body) {
      const path = pathOf(key);
      await mkdir(dirname(path), { recursive: true });
      const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
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
    async exists(key) {
      return Boolean(await stat(pathOf(key)).catch(() => null));
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
