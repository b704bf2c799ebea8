import { StringDecoder } from 'node:string_decoder';

/**
 * Cuts an upstream server-sent-event byte stream into events (the text between blank lines), in
 * time linear in the input:
 * - only the newly arrived text is searched for the blank line that ends an event, and the pieces
 *   of an unfinished event are kept apart and joined once, when it completes (appending to one
 *   growing string and searching it whole made one large event cost quadratic time);
 * - CRLF, CR and LF all end a line, also when a CRLF pair is split across two network chunks (a CR
 *   at the end of a chunk is remembered, and an LF that starts the next chunk is then dropped);
 * - an unfinished event larger than `maxEventBytes` throws `SseEventTooLarge`.
 */
export class SseEventTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`an upstream event exceeded ${limit} bytes`);
    this.name = 'SseEventTooLarge';
  }
}

export class SseSplitter {
  private readonly decoder = new StringDecoder('utf8');
  /** Text of the unfinished event, LF-normalised, in arrival order. */
  private pieces: string[] = [];
  private pendingBytes = 0;
  private endsWithNewline = false;
  private heldCarriageReturn = false;

  constructor(private readonly maxEventBytes: number) {}

  /**
   * Feeds one chunk. Returns the events completed by it, joined by blank lines as they arrived
   * (without the final blank line), or null when no event ended in this chunk.
   */
  push(bytes: Uint8Array): string | null {
    const text = this.normalise(this.decoder.write(bytes as Buffer));
    if (text === '') return null;
    const cut = lastBlankLine(text);
    if (cut >= 0) return this.complete(text.slice(0, cut), text.slice(cut + 2));
    if (this.endsWithNewline && text.startsWith('\n')) return this.complete(null, text.slice(1));
    this.pieces.push(text);
    this.pendingBytes += bytes.length;
    this.endsWithNewline = text.endsWith('\n');
    if (this.pendingBytes > this.maxEventBytes) throw new SseEventTooLarge(this.maxEventBytes);
    return null;
  }

  /** What is left when the stream ends (an event the upstream did not close with a blank line). */
  end(): string {
    const tail = this.pieces.join('') + this.normalise(this.decoder.end());
    this.pieces = [];
    this.pendingBytes = 0;
    return tail;
  }

  private complete(head: string | null, rest: string): string {
    let events = this.pieces.join('');
    // head === null: the blank line was the pending text's final LF plus this chunk's first LF.
    events = head === null ? events.slice(0, -1) : events + head;
    this.pieces = rest ? [rest] : [];
    this.pendingBytes = rest ? Buffer.byteLength(rest) : 0;
    this.endsWithNewline = rest.endsWith('\n');
    if (this.pendingBytes > this.maxEventBytes) throw new SseEventTooLarge(this.maxEventBytes);
    return events;
  }

  private normalise(text: string): string {
    if (text === '') return text;
    if (this.heldCarriageReturn && text.startsWith('\n')) text = text.slice(1);
    this.heldCarriageReturn = text.endsWith('\r');
    return text.includes('\r') ? text.replace(/\r\n?/g, '\n') : text;
  }
}

/** Index of the last `\n\n` in `text`, searching forward so each character is looked at once. */
function lastBlankLine(text: string): number {
  let found = text.indexOf('\n\n');
  if (found < 0) return -1;
  for (let next = text.indexOf('\n\n', found + 2); next >= 0; next = text.indexOf('\n\n', found + 2)) found = next;
  // A run of three or more LFs: the last blank line is the one that ends at the run's end.
  while (text.charCodeAt(found + 2) === 10) found++;
  return found;
}

/**
 * The `data` of each event of a server-sent-event body, as it arrives (multi-line data joined by
 * LF, as the format says; comments, `event:` and `id:` lines and data-less events skipped). The
 * reader of another service's or a provider's stream: JSON parsing, `[DONE]` and errors are the
 * caller's. An event larger than `maxEventBytes` throws `SseEventTooLarge`.
 */
export async function* sseData(body: AsyncIterable<Uint8Array>, maxEventBytes: number): AsyncGenerator<string> {
  const splitter = new SseSplitter(maxEventBytes);
  for await (const bytes of body) {
    const events = splitter.push(bytes);
    if (events !== null) yield* dataOf(events);
  }
  const tail = splitter.end();
  if (tail.trim()) yield* dataOf(tail);
}

function* dataOf(events: string): Generator<string> {
  for (const event of events.split('\n\n')) {
    let data: string | null = null;
    for (const line of event.split('\n')) {
      if (!line.startsWith('data:')) continue;
      const value = line.slice(line.startsWith('data: ') ? 6 : 5);
      data = data === null ? value : `${data}\n${value}`;
    }
    if (data !== null && data.trim()) yield data;
  }
}
