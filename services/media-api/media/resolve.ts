import { ApiError, MEDIA_ID_PATTERN, MEDIA_ID_SOURCE } from '../../kit/index.js';
import { objectKey } from '../../../domains/media/index.js';
import type { MediaDeps } from './media.js';

/**
 * Media references in any JSON (a chat payload, a Responses input): `data:<mime>;jan_<id>`
 * placeholders anywhere, and bare `jan_…` ids as `image_url.url` or as the string `image_url` of
 * an `input_image` part. `resolveReferences` returns a copy with each replaced by a fresh download
 * URL; a JSON without references comes back deep-equal.
 */
const PLACEHOLDER = new RegExp(`^data:([\\w.+-]+\\/[\\w.+-]+);(${MEDIA_ID_SOURCE})$`);

type Json = unknown;

/** The id a string refers to in this position, or null. */
function referenceIn(value: string, bareAllowed: boolean): string | null {
  const placeholder = PLACEHOLDER.exec(value);
  if (placeholder) return placeholder[2]!;
  return bareAllowed && MEDIA_ID_PATTERN.test(value) ? value : null;
}

/**
 * Sets an own property even when `key` is `__proto__`: a plain assignment would set the copy's
 * prototype instead, and the key (an own key of the parsed JSON) would be lost from the payload.
 */
function setOwn(target: Record<string, Json>, key: string, value: Json): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** Walks `node`; `visit` sees each string with whether a bare id counts there. */
function walk(node: Json, visit: (value: string, bareAllowed: boolean) => string, depth = 0): Json {
  if (depth > 128) throw new ApiError(400, 'The payload is nested too deeply', { param: 'payload' });
  if (typeof node === 'string') return visit(node, false);
  if (Array.isArray(node)) return node.map((item) => walk(item, visit, depth + 1));
  if (node && typeof node === 'object') {
    const out: Record<string, Json> = {};
    for (const [key, value] of Object.entries(node as Record<string, Json>)) {
      if (key === 'image_url' && typeof value === 'string') setOwn(out, key, visit(value, true));
      else if (key === 'image_url' && value && typeof value === 'object' && !Array.isArray(value)) {
        const inner: Record<string, Json> = {};
        for (const [k, v] of Object.entries(value as Record<string, Json>)) {
          setOwn(inner, k, k === 'url' && typeof v === 'string' ? visit(v, true) : walk(v, visit, depth + 2));
        }
        setOwn(out, key, inner);
      } else setOwn(out, key, walk(value, visit, depth + 1));
    }
    return out;
  }
  return node;
}

export function findReferences(payload: Json): string[] {
  const ids = new Set<string>();
  walk(payload, (value, bare) => {
    const id = referenceIn(value, bare);
    if (id) ids.add(id);
    return value;
  });
  return [...ids];
}

/**
 * Distinct media a payload may reference. Far above what any model accepts in one request (a few
 * hundred images at most), and it keeps the lookup one bounded query: without it, tens of
 * thousands of ids (a few MB of JSON) overflowed PostgreSQL's 65,535 bind parameters and the
 * client's mistake was answered as a 503 outage.
 */
export const MAX_REFERENCES = 1000;

export async function resolveReferences(deps: MediaDeps, userId: string, payload: Json, expiresIn = deps.urlTtlSeconds): Promise<{ payload: Json }> {
  const ids = findReferences(payload);
  if (ids.length === 0) return { payload };
  if (ids.length > MAX_REFERENCES) {
    throw new ApiError(400, `The payload references ${ids.length} distinct media; at most ${MAX_REFERENCES} can be resolved at once`, { param: 'payload' });
  }
  const rows = await deps.store.readyManyOf(userId, ids);
  const byId = new Map(rows.map((row) => [row.id, row]));
  const missing = ids.find((id) => !byId.has(id));
  if (missing) throw new ApiError(404, `No media found with id '${missing}'`, { param: 'payload' });
  const urls = new Map<string, string>();
  await Promise.all(
    rows.map(async (row) => {
      const link = await deps.storage.downloadUrl(objectKey(row.sha256!), { expiresIn, contentType: row.mime_type, filename: row.filename });
      urls.set(row.id, link.url);
    }),
  );
  return {
    payload: walk(payload, (value, bare) => {
      const id = referenceIn(value, bare);
      return id ? urls.get(id)! : value;
    }),
  };
}
