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
      // A multi-byte character cut at the cap is left out whole; other invalid bytes become U+FFFD.
      const bytes = Buffer.concat(chunks, kept);
      return new TextDecoder('utf-8', { fatal: false }).decode(seen > kept ? withoutCutCharacter(bytes) : bytes);
    },
  };
}

/** `bytes` without a last UTF-8 sequence that the cut left incomplete (a lead byte missing its continuation bytes). */
function withoutCutCharacter(bytes: Buffer): Buffer {
  let lead = bytes.length - 1;
  while (lead >= 0 && bytes.length - lead < 4 && (bytes[lead]! & 0xc0) === 0x80) lead--;
  if (lead < 0) return bytes;
  const b = bytes[lead]!;
  const length = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
  return bytes.length - lead < length ? bytes.subarray(0, lead) : bytes;
}
