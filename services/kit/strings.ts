/**
 * True when `text` starts with one of `prefixes`. A loop rather than `prefixes.some((p) => …)`,
 * which makes a closure (over `text`) on every call: the identity plugin asks it for every header
 * of every request, and the edge's service for every request's path.
 */
export function startsWithAny(text: string, prefixes: readonly string[]): boolean {
  for (const prefix of prefixes) if (text.startsWith(prefix)) return true;
  return false;
}
