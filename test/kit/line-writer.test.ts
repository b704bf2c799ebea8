import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync, readFileSync, readSync } from 'node:fs';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { LineWriter } from '../../services/kit/logger.js';

const numbered = (from: number, count: number, pad = 40) =>
  Array.from({ length: count }, (_, i) => `${JSON.stringify({ n: from + i, text: 'é'.repeat(pad) })}\n`);
const numbersIn = (text: string) => text.split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { n: number }).n);
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

async function fileWriter(t: import('ava').ExecutionContext, bufferBytes: number) {
  const dir = await mkdtemp(join(tmpdir(), 'line-writer-'));
  const file = join(dir, 'out.log');
  const handle = await open(file, 'w');
  t.teardown(async () => {
    await handle.close();
    await rm(dir, { recursive: true, force: true });
  });
  return { writer: new LineWriter(handle.fd, bufferBytes), read: () => readFileSync(file, 'utf8') };
}

test('a turn with more lines than the buffer holds writes them all, in order, with multi-byte characters intact', async (t) => {
  const { writer, read } = await fileWriter(t, 512);
  const lines = numbered(0, 60);
  for (const line of lines) writer.write(line);
  t.true(read().length > 0, 'a full buffer was written before the turn ended');
  await nextTurn();
  t.is(read(), lines.join(''));
});

test('a line longer than the buffer keeps its place between shorter ones', async (t) => {
  const { writer, read } = await fileWriter(t, 512);
  const long = `${JSON.stringify({ n: 3, text: 'x'.repeat(2_000) })}\n`;
  const lines = [...numbered(0, 3), long, ...numbered(4, 3)];
  for (const line of lines) writer.write(line);
  await nextTurn();
  t.deepEqual(numbersIn(read()), [0, 1, 2, 3, 4, 5, 6]);
  t.is(read(), lines.join(''));
});

/**
 * Both ends of a named pipe, opened non-blocking: a write past what the pipe holds gets EAGAIN.
 * `closeReader` leaves the writer with no reader (EPIPE). What is still open is closed after the test.
 */
function nonBlockingFifo(t: import('ava').ExecutionContext) {
  const dir = execFileSync('mktemp', ['-d']).toString().trim();
  const fifo = join(dir, 'out');
  execFileSync('mkfifo', [fifo]);
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const output = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
  let readerOpen = true;
  t.teardown(() => {
    closeSync(output);
    if (readerOpen) closeSync(reader);
    execFileSync('rm', ['-rf', dir]);
  });
  const closeReader = () => {
    readerOpen = false;
    closeSync(reader);
  };
  return { reader, output, closeReader };
}

test('a full non-blocking output keeps what it refused and the lines after it, and writes them in order once it drains', (t) => {
  const { reader, output } = nonBlockingFifo(t);
  const writer = new LineWriter(output, 4_096);
  // ~300 KiB: several times what a pipe takes before its writer gets EAGAIN (64 KiB on Linux).
  const lines = numbered(0, 3_000, 30);
  for (const line of lines) writer.write(line);

  const expected = Buffer.from(lines.join(''));
  const parts: Buffer[] = [];
  let received = 0;
  const chunk = Buffer.alloc(65_536);
  const drain = () => {
    for (;;) {
      try {
        const n = readSync(reader, chunk);
        if (n === 0) return;
        parts.push(Buffer.from(chunk.subarray(0, n)));
        received += n;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return;
        throw error;
      }
    }
  };
  // Read what the pipe holds, let the writer try again at once, until everything arrived.
  for (let round = 0; round < 1_000 && received < expected.length; round++) {
    drain();
    writer.flushSync(0);
  }
  drain();
  t.is(Buffer.concat(parts).toString('utf8'), lines.join(''));
});

test('an output whose reader is gone ends logging quietly: no throw, mid-turn or at the flush', (t) => {
  const { output, closeReader } = nonBlockingFifo(t);
  closeReader();
  const writer = new LineWriter(output, 1_024);
  // Enough to fill the buffer several times: each fill tries a write, which meets EPIPE.
  t.notThrows(() => {
    for (const line of numbered(0, 200)) writer.write(line);
    writer.flushSync(0);
  });
});
