import net from 'node:net';
import type { ExecutionContext } from 'ava';
import type { Child } from './process.js';
import { waitFor } from './wait.js';

// What the SIGTERM suites observe of a process that drains: its log line, its readiness on a
// connection opened before the signal (new connections are refused once the drain starts), and a
// stream that was in flight when the signal came.

/** Resolves once the process logged that it is draining (after its first SIGTERM). */
export const drainStarted = (child: Child) => waitFor(() => child.stdout().includes('shutting down'), 30_000, 'drain started');

/** A connection that has sent most of `GET /readyz` before the signal: it is in use, so the drain keeps it. */
export async function readyzHalfSent(port: number): Promise<{ finish(): Promise<{ status: number; body: any }> }> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write('GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n');
  let raw = '';
  socket.on('data', (c) => (raw += c));
  const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    async finish() {
      socket.write('\r\n');
      await ended;
      const [head, body = ''] = raw.split('\r\n\r\n');
      // The JSON alone: a chunked answer frames it with chunk sizes.
      const json = body.includes('{') ? body.slice(body.indexOf('{'), body.lastIndexOf('}') + 1) : 'null';
      return { status: Number(head!.split(' ')[1]), body: JSON.parse(json) };
    },
  };
}

/**
 * Resolves once the first chunk of `res`'s body arrived; `rest` is the whole body text once the
 * stream ends, and rejects if it is cut (a rejection nobody awaits is not reported as unhandled).
 */
export async function afterFirstChunk(res: Response): Promise<{ rest: Promise<string> }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value, { stream: true });
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text;
      text += decoder.decode(value, { stream: true });
    }
  })();
  rest.catch(() => {});
  return { rest };
}

/**
 * SIGTERM, then a second one once the drain has started, while `stream` is held open: the process
 * exits 1 at once, saying why, and the held stream is cut, not left hanging.
 */
export async function secondSignalExits(t: ExecutionContext, child: Child, stream: { rest: Promise<string> }): Promise<void> {
  child.process.kill('SIGTERM');
  await drainStarted(child);
  child.process.kill('SIGTERM');
  const exit = await child.exited;
  t.is(exit.code, 1);
  t.true(child.stdout().includes('second signal'), child.stdout().slice(-2000));
  const text = await stream.rest.catch(() => 'cut');
  t.false(text.endsWith('[DONE]\n\n'), 'the held stream is cut');
}
