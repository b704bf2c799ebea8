/**
 * Splits text into overlapping chunks of about `size` characters. A chunk ends at the best
 * boundary in its second half (paragraph, then line, then sentence, then word), and the next
 * one starts `overlap` characters earlier, at a word start, so a passage cut by one boundary is
 * whole in a neighbouring chunk.
 */
export function chunkText(text: string, size: number, overlap: number): string[] {
  const clean = text.replace(/\r\n?/g, '\n').trim();
  if (clean.length === 0) return [];
  const chunks: string[] = [];
  let start = 0;
  while (start < clean.length) {
    let end = Math.min(start + size, clean.length);
    if (end < clean.length) end = boundary(clean, start + Math.floor(size / 2), end);
    // A cut inside a surrogate pair (an emoji in text without spaces) would leave half a character in each chunk.
    if (end < clean.length && isHighSurrogate(clean.charCodeAt(end - 1))) end--;
    const piece = clean.slice(start, end).trim();
    if (piece) chunks.push(piece);
    if (end >= clean.length) break;
    let next = Math.max(end - overlap, start + 1);
    // Start the next chunk at a word, not mid-word.
    while (next < end && /\S/.test(clean[next - 1] ?? ' ')) next++;
    start = next;
  }
  return chunks;
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;

function boundary(text: string, from: number, to: number): number {
  const window = text.slice(from, to);
  for (const pattern of [/\n\s*\n/g, /\n/g, /[.!?]["')\]]?\s/g, /\s/g]) {
    let last = -1;
    for (const match of window.matchAll(pattern)) last = match.index! + match[0].length;
    if (last > 0) return from + last;
  }
  return to;
}
