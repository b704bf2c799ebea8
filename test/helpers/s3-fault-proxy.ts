import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** An S3 error answer: the status and the `Code` of its XML body. */
export interface S3Refusal {
  status: number;
  code: string;
  message: string;
}

/**
 * An HTTP proxy in front of a real S3-protocol server (s3rver) that answers some requests with an
 * S3 error instead of passing them on: `refuse` sees each request and names the error to answer,
 * or null to forward it. For faults a TCP proxy cannot make: one key refused, a store answering
 * 503 SlowDown.
 */
export async function startS3FaultProxy(upstreamPort: number, refuse: (req: http.IncomingMessage) => S3Refusal | null) {
  const server = http.createServer((req, res) => {
    const refusal = refuse(req);
    if (refusal) {
      req.resume();
      req.on('end', () => {
        res
          .writeHead(refusal.status, { 'content-type': 'application/xml' })
          .end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${refusal.code}</Code><Message>${refusal.message}</Message></Error>`);
      });
      return;
    }
    const forward = http.request({ host: '127.0.0.1', port: upstreamPort, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    forward.on('error', () => res.destroy());
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
