/**
 * Steps that are usually ready at once: a cache hit, an in-process counter, a host effect that is a
 * plain call. Such a step returns its value, or a promise only when it has to wait, and its caller
 * waits only then. An `await` of a plain value still costs an async frame, a promise and a turn of
 * the microtask queue; on the request path that was several per request (bench/README.md,
 * twenty-third pass).
 */
export type MaybePromise<T> = T | Promise<T>;

/** True for a promise (or any thenable). */
export const isPending = (value: unknown): value is PromiseLike<unknown> => typeof (value as PromiseLike<unknown> | null | undefined)?.then === 'function';

/**
 * `next(value)` now when `value` is ready; once it settles when it is pending. For a `next` that is a
 * module-level function; where it would be a closure made per call, the caller writes the
 * `isPending` test out instead, so the ready path makes no closure.
 */
export function whenSettled<T, R>(value: T | PromiseLike<T>, next: (value: T) => R | PromiseLike<R>): R | Promise<R> {
  return isPending(value) ? Promise.resolve(value).then(next) : (next(value as T) as R | Promise<R>);
}
