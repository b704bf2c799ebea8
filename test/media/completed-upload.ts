import type { Knex } from 'knex';
import type { Clock } from '../../services/kit/index.js';
import { newMediaId, uploadKey, type IngestDeps } from '../../domains/media/index.js';

/**
 * A direct upload of `bytes` whose client has called complete (`completing`), with its staging
 * object in place, waiting for the media-dedup worker to finalise it; its id.
 */
export async function completedUpload(
  deps: Pick<IngestDeps, 'store' | 'storage'>,
  knex: Knex,
  clock: Clock,
  userId: string,
  bytes: Buffer,
  mimeType: string,
): Promise<string> {
  const id = newMediaId(clock);
  const now = Math.floor(clock.now() / 1000);
  await deps.store.insert(knex, {
    id, user_id: userId, state: 'completing', sha256: null, mime_type: mimeType, bytes: bytes.length, width: null, height: null,
    filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now, expires_at: now + 900,
  });
  await deps.storage.put(uploadKey(id), bytes, mimeType);
  return id;
}
