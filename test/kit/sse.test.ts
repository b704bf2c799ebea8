import test from 'ava';
import fc from 'fast-check';
import { SseEventTooLarge, SseSplitter, sseData } from '../../services/kit/index.js';

// The splitter must give the same events however the network cuts the bytes.
const eventsOf = (pieces: Uint8Array[], max = 1 << 20): string[] => {
  const splitter = new SseSplitter(max);
  const out: string[] = [];
  for (const piece of pieces) {
    const complete = splitter.push(piece);
    if (complete !== null) out.push(...complete.split('\n\n'));
  }
  const tail = splitter.end().trim();
  if (tail) out.push(tail);
  return out;
};
const bytesOf = (text: string) => Buffer.from(text, 'utf8');
const everyByte = (text: string) => [...bytesOf(text)].map((b) => Uint8Array.of(b));

const STREAM = 'data: {"a":1,\r\ndata: "b":"é€😀"}\r\n\r\n: comment\r\n\r\ndata: two\rdata: lines\r\rdata: [DONE]\r\n\r\n';
const EXPECTED = ['data: {"a":1,\ndata: "b":"é€😀"}', ': comment', 'data: two\ndata: lines', 'data: [DONE]'];

test('CRLF, CR and LF line ends; an event with two data lines stays one event when split at every byte', (t) => {
  t.deepEqual(eventsOf([bytesOf(STREAM)]), EXPECTED);
  t.deepEqual(eventsOf(everyByte(STREAM)), EXPECTED);
  // The split that broke the old relay: CR at the end of one chunk, LF at the start of the next.
  const at = STREAM.indexOf('\r\ndata: "b"') + 1;
  t.deepEqual(eventsOf([bytesOf(STREAM.slice(0, at)), bytesOf(STREAM.slice(at))]), EXPECTED);
});

test('any way of cutting the bytes gives the same events (property)', (t) => {
  const whole = bytesOf(STREAM);
  fc.assert(
    fc.property(fc.uniqueArray(fc.integer({ min: 1, max: whole.length - 1 }), { maxLength: 40 }), (cuts) => {
      const points = [0, ...cuts.sort((a, b) => a - b), whole.length];
      const pieces = points.slice(1).map((end, i) => whole.subarray(points[i], end));
      t.deepEqual(eventsOf(pieces), EXPECTED);
    }),
    { numRuns: 300 },
  );
});

test('an unfinished event over the limit throws; events under it pass', (t) => {
  const splitter = new SseSplitter(1000);
  t.is(splitter.push(bytesOf(`data: ${'x'.repeat(900)}\n\n`)), `data: ${'x'.repeat(900)}`);
  t.is(splitter.push(bytesOf('data: ')), null);
  t.throws(() => {
    for (let i = 0; i < 20; i++) splitter.push(bytesOf('y'.repeat(100)));
  }, { instanceOf: SseEventTooLarge });
});

test('a large event arriving in small pieces is handled in linear time (figure printed, not asserted)', (t) => {
  const splitter = new SseSplitter(64 << 20);
  const piece = bytesOf('z'.repeat(16 * 1024));
  const started = performance.now();
  for (let i = 0; i < 2048; i++) splitter.push(piece); // 32 MiB without a blank line
  const complete = splitter.push(bytesOf('\n\n'));
  const ms = performance.now() - started;
  t.is(complete?.length, 32 * 1024 * 1024);
  t.log(`32 MiB event in 16 KiB chunks: ${ms.toFixed(0)} ms`);
});

test('sseData yields each event\'s data as it arrives: lines joined, comments and event names skipped, an unclosed last event kept', async (t) => {
  const body = async function* () {
    for (const piece of everyByte('event: a\ndata: {"x":\r\ndata: 1}\n\n: keep-alive\n\nid: 7\nevent: b\n\ndata:[DONE]\n\ndata: tail')) yield piece;
  };
  const seen: string[] = [];
  for await (const data of sseData(body(), 1 << 20)) seen.push(data);
  t.deepEqual(seen, ['{"x":\n1}', '[DONE]', 'tail']);
  const huge = async function* () {
    yield bytesOf(`data: ${'x'.repeat(2048)}`);
  };
  await t.throwsAsync(async () => {
    for await (const _ of sseData(huge(), 1024));
  }, { instanceOf: SseEventTooLarge });
});
