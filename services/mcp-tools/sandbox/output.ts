/**
 * Collects one output stream of a sandboxed process up to `limit` bytes; the rest is read and
 * dropped (so the child never blocks on a full pipe) and the result is marked truncated.
 */
export function cappedCollector(limit: number) {
  const chunks: Buffer[] = [];
  let kept = 0;
  let seen = 0;
  return {
    push(chunk: Buffer) {
      seen += chunk.length;
      if (kept >= limit) return;
      const room = limit - kept;
      const piece = chunk.length > room ? chunk.subarray(0, room) : chunk;
      chunks.push(piece);
      kept += piece.length;
    },
    /** Bytes the process wrote, kept or not. */
    get seen() {
      return seen;
    },
    get truncated() {
      return seen > kept;
    },
    text(): string {
      // A multi-byte character cut at the cap becomes U+FFFD rather than invalid text.
      return new TextDecoder('utf-8', { fatal: false }).decode(Buffer.concat(chunks, kept));
    },
  };
}
