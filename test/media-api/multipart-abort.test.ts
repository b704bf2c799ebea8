import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import type { Request } from 'express';
import { ApiError } from '../../services/kit/index.js';
import { readMultipart } from '../../services/media-api/media/sources.js';

// A client that closes its connection in the middle of a multipart upload. The request then
// errors and never ends; the reader listened for the parser's end only, so the upload's promise
// never settled: the handler waited for ever, holding what it had buffered of the file part.
// It now settles with a 400 naming `file` as soon as the request errors.
test('a multipart body whose connection closes mid-part settles the reader with a 400 naming file', async (t) => {
  let outcome: 'pending' | 'resolved' | ApiError | unknown = 'pending';
  let requestClosed!: () => void;
  const closed = new Promise<void>((resolve) => (requestClosed = resolve));
  const server = http.createServer((req, res) => {
    readMultipart(req as Request, 1024 * 1024).then(
      () => (outcome = 'resolved'),
      (error) => (outcome = error),
    );
    // 'error' (which settles the reader) comes before 'close' on an aborted request; the reader's
    // reaction is queued when it settles, before this one.
    req.on('close', () => requestClosed());
    res.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const boundary = 'abortBoundary';
    const head = [
      'POST /upload HTTP/1.1',
      'Host: 127.0.0.1',
      `Content-Type: multipart/form-data; boundary=${boundary}`,
      'Content-Length: 100000',
      '',
      '',
    ].join('\r\n');
    const partStart = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n`;
    const socket = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(head + partStart + 'x'.repeat(2000), () => socket.destroy());
    await closed;
    t.true(outcome instanceof ApiError, `the reader settled with an ApiError (got ${String(outcome)})`);
    const error = outcome as ApiError;
    t.is(error.status, 400);
    t.is(error.param, 'file');
    t.regex(error.message, /connection closed before it ended/);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
