import { ApiError } from '../../kit/index.js';
import { isStoreServerFault, type ObjectStorage } from '../../../domains/media/index.js';

/**
 * An object store that answers but fails (S3's 503 SlowDown or ServiceUnavailable, a 500
 * InternalError, still failing after the SDK's own retries) is an outage of a dependency, like one
 * that does not answer at all: media-api answers 503 `service_unavailable` (with retry advice),
 * not a 500 that reads as a bug of this service. The store's 4xx answers (a refused credential, a
 * missing bucket: configuration faults) and every other error pass through unchanged. The
 * classifier, `isStoreServerFault`, is the media domain's: the media-dedup worker uses the same one.
 */
export const storeUnavailable = (cause: unknown) => new ApiError(503, 'The object store is temporarily unavailable; retry later', { cause });

/** `storage` with its calls to the store answering a store's server fault as a 503. */
export function withStoreOutages(storage: ObjectStorage): ObjectStorage {
  const guarded =
    <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        return await call(...args);
      } catch (error) {
        throw isStoreServerFault(error) ? storeUnavailable(error) : error;
      }
    };
  return {
    driver: storage.driver,
    put: guarded(storage.put.bind(storage)),
    read: guarded(storage.read.bind(storage)),
    open: guarded(storage.open.bind(storage)),
    size: guarded(storage.size.bind(storage)),
    delete: guarded(storage.delete.bind(storage)),
    exists: guarded(storage.exists.bind(storage)),
    ...(storage.removeStaleTemporaries ? { removeStaleTemporaries: storage.removeStaleTemporaries.bind(storage) } : {}),
    downloadUrl: storage.downloadUrl.bind(storage),
    uploadUrl: storage.uploadUrl.bind(storage),
    close: storage.close.bind(storage),
  };
}
