import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local HTTP server for URL uploads: `/img/<name>` serves the registered bytes, `/redirect?to=`
 * answers 302 to any location, `/status/<code>` answers that status with no body (and no Location).
 * It listens on every interface, so `localhost` reaches it whichever address family the name
 * resolves to first.
 */
export async function startImageServer() {
  const files = new Map<string, { body: Buffer; type: string }>();
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/redirect') {
      res.writeHead(302, { location: url.searchParams.get('to') ?? '/' }).end();
      return;
    }
    const status = /^\/status\/(\d{3})$/.exec(url.pathname);
    if (status) {
      res.writeHead(Number(status[1])).end();
      return;
    }
    const file = files.get(url.pathname.replace(/^\/img\//, ''));
    if (!file) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': file.type, 'content-length': file.body.length }).end(file.body);
  });
  await new Promise<void>((resolve) => server.listen(0, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    serve(name: string, body: Buffer, type = 'application/octet-stream') {
      files.set(name, { body, type });
      return `http://localhost:${port}/img/${name}`;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
