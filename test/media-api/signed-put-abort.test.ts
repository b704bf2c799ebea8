import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import type { Request, Response } from 'express';
import { ApiError, ManualClock } from '../../services/kit/index.js';
import { acceptSignedUpload, type SignedRouteDeps } from '../../services/media-api/files/signed.js';

// A direct upload (filesystem driver's signed PUT) whose client closes the connection mid-body.
// The body loop rethrew the bare socket error (ECONNRESET "aborted"), which the kit counts as a
// dependency outage: every abandoned upload was logged and measured as a 503. It is the client's
// doing: a 400 naming `body`, and nothing is written.
test('a signed PUT whose connection closes mid-body is a 400 naming body, not an outage; nothing is written', async (t) => {
  const id = `jan_${'0'.repeat(26)}`;
  const clock = new ManualClock();
  let writes = 0;
  const deps = {
    clock,
    maxBytes: 1_000_000,
    signer: { verify: () => null },
    store: {
      byId: async () => ({ id, state: 'pending', expires_at: Math.floor(clock.now() / 1000) + 600 }),
      whileReservationOpen: async () => {
        writes++;
        return true;
      },
    },
    storage: {
      put: async () => {
        writes++;
      },
    },
  } as unknown as SignedRouteDeps;

  let outcome: unknown = 'pending';
  let requestClosed!: () => void;
  const closed = new Promise<void>((resolve) => (requestClosed = resolve));
  const server = http.createServer((req, res) => {
    Object.assign(req, { params: { key: ['uploads', id] }, query: { ct: 'image/png', len: '100000', exp: '1', sig: 'x' } });
    res.on('error', () => {});
    acceptSignedUpload(deps, req as unknown as Request, res as unknown as Response).then(
      () => (outcome = 'resolved'),
      (error) => (outcome = error),
    );
    req.on('close', () => requestClosed());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const socket = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const head = ['PUT /v1/media/signed/uploads/x HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: image/png', 'Content-Length: 100000', '', ''].join('\r\n');
    // Past the reservation check (an await on the store) the loop reads the body; the connection
    // closes once the first 2000 bytes are out.
    socket.write(head + 'x'.repeat(2000), () => socket.destroy());
    await closed;
    // The loop sees the error on its next read; wait for the handler to settle.
    const settled = await waitSettled(() => outcome);
    // Before: the bare socket error, which the kit's error handler answers as a 503 outage.
    t.true(settled instanceof ApiError, `an ApiError (got ${String(settled)})`);
    t.is((settled as ApiError).status, 400);
    t.is((settled as ApiError).param, 'body');
    t.is(writes, 0, 'nothing written');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** Yields to the event loop until the handler's promise settles (bounded by the number of turns, not by time). */
async function waitSettled(read: () => unknown): Promise<unknown> {
  for (let turn = 0; turn < 1000 && read() === 'pending'; turn++) await new Promise((resolve) => setImmediate(resolve));
  return read();
}
