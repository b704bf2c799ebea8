/**
 * Whether an object-store error is the store failing rather than the request or the code: an S3
 * server fault (the SDK's `$fault: 'server'`, or any HTTP 5xx: 503 SlowDown or
 * ServiceUnavailable, 500 InternalError), still failing after the SDK's own retries. It is an
 * outage of a dependency, like a store that does not answer at all: media-api answers it 503
 * `service_unavailable` (`services/media-api/media/storage-outage.ts`) and the media-dedup worker
 * retries the event for as long as it lasts instead of dead-lettering it. The store's 4xx answers
 * (a refused credential, a missing bucket: configuration faults) are not. Follows `cause` chains
 * (a wrapped fault counts), at most a few links deep.
 *
 * A store that cannot be reached or does not answer in time fails with a socket-style error
 * (ECONNREFUSED, ETIMEDOUT: see `s3.ts`), which the kit's `isDependencyUnavailable` already knows;
 * this covers what only the AWS SDK knows, so the kit never has to.
 */
export function isStoreServerFault(error: unknown): boolean {
  for (let current = error, depth = 0; current && typeof current === 'object' && depth < 5; depth++) {
    const e = current as { $fault?: unknown; $metadata?: { httpStatusCode?: unknown }; cause?: unknown };
    const status = e.$metadata?.httpStatusCode;
    if (e.$fault === 'server' || (typeof status === 'number' && status >= 500)) return true;
    current = e.cause;
  }
  return false;
}

/**
 * What a log line says of a failure: its name and message, never the error object itself (an S3
 * SDK error carries the whole HTTP exchange).
 */
export function failureOf(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 500);
  return String(error).slice(0, 500);
}
