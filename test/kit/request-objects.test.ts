import { createServer, get, IncomingMessage, ServerResponse, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import express from 'express';
import {
  adoptRequestObjects,
  createLogger,
  createServiceApp,
  listen,
  route,
  ServiceRequest,
  ServiceResponse,
  type ResponseObserver,
  type Route,
  type UserDirectory,
  usageReportHandOver,
  whenClosed,
} from '../../services/kit/index.js';

// The kit's servers build req and res with Express's members already on their prototypes, so no app
// changes an object's prototype per request (V8 handles such objects far worse: see request-objects.ts).
const users: UserDirectory = { resolve: async (claims) => ({ ...claims, isAdmin: false, isGuest: false }), invalidate: () => {} };
const SECRET = 's'.repeat(40);
const as = { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': 'user_1' };

interface Seen {
  requestClass: boolean;
  responseClass: boolean;
  ownApp: boolean;
  members: string[];
}

/** What a handler sees of its req and res: the class they were built with, their app, Express's members at work. */
function inspect(app: () => unknown) {
  return ({ req, res }: { req: express.Request; res: express.Response }): Seen => ({
    requestClass: Object.getPrototypeOf(req) === ServiceRequest.prototype,
    responseClass: Object.getPrototypeOf(res) === ServiceResponse.prototype,
    ownApp: req.app === app() && res.app === app(),
    members: [req.get('x-user-id') ?? '', req.path, String(req.query.q ?? ''), typeof res.json, typeof res.status],
  });
}

function appWith(name: string): { app: express.Express; routes: Route[] } {
  let app: express.Express | undefined;
  const seen = inspect(() => app);
  const routes: Route[] = [
    route({ method: 'get', path: '/v1/plain', summary: 'parameter-free (direct dispatch)', access: 'user', handler: seen }),
    route({ method: 'get', path: '/v1/things/:id', summary: 'with a parameter (Express router)', access: 'user', handler: seen }),
  ];
  app = createServiceApp({ name, logger: createLogger({ level: 'silent', name }), gatewaySecret: SECRET, users, routeTable: routes, bodyLimit: 1024 });
  return { app, routes };
}

async function getJson(url: string): Promise<Seen> {
  const res = await fetch(url, { headers: as });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Seen;
}

test('on a kit server, req and res keep the classes they were built with, directly dispatched or routed by Express', async (t) => {
  const { app } = appWith('objects-kit');
  const server = await listen(app, { host: '127.0.0.1', port: 0 });
  t.teardown(() => server.close(100));
  for (const path of ['/v1/plain?q=1', '/v1/things/a?q=1']) {
    const seen = await getJson(`http://127.0.0.1:${server.port}${path}`);
    t.deepEqual(seen, { requestClass: true, responseClass: true, ownApp: true, members: ['user_1', path.split('?')[0]!, '1', 'function', 'function'] }, path);
  }
});

test('on a server the kit did not build, Express gives plain objects the same members as before', async (t) => {
  const { app } = appWith('objects-plain');
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as AddressInfo).port;
  for (const path of ['/v1/plain?q=2', '/v1/things/b?q=2']) {
    const seen = await getJson(`http://127.0.0.1:${port}${path}`);
    t.deepEqual(seen, { requestClass: true, responseClass: true, ownApp: true, members: ['user_1', path.split('?')[0]!, '2', 'function', 'function'] }, path);
  }
});

test('two apps in one process each see themselves as req.app', async (t) => {
  const one = appWith('objects-one');
  const other = appWith('objects-other');
  const [a, b] = await Promise.all([listen(one.app, { host: '127.0.0.1', port: 0 }), listen(other.app, { host: '127.0.0.1', port: 0 })]);
  t.teardown(() => Promise.all([a.close(100), b.close(100)]));
  for (const [server, path] of [[a, '/v1/plain'], [b, '/v1/plain'], [a, '/v1/things/x'], [b, '/v1/things/y']] as const) {
    t.true((await getJson(`http://127.0.0.1:${server.port}${path}`)).ownApp, `${server.port}${path}`);
  }
});

test('mounted in another app, an adopting app sees itself as req.app and hands the request back with the outer app', async (t) => {
  const inner = express();
  adoptRequestObjects(inner);
  inner.get('/inner', (req, res) => {
    res.json({ inner: req.app === inner && res.app === inner, shared: Object.getPrototypeOf(req) !== ServiceRequest.prototype });
  });
  const outer = express();
  adoptRequestObjects(outer);
  outer.use(inner);
  outer.use((req, res) => {
    res.status(404).json({ outer: req.app === outer && res.app === outer });
  });
  const server = await listen(outer, { host: '127.0.0.1', port: 0 });
  t.teardown(() => server.close(100));

  t.deepEqual(await (await fetch(`http://127.0.0.1:${server.port}/inner`)).json(), { inner: true, shared: true });
  const fellThrough = await fetch(`http://127.0.0.1:${server.port}/elsewhere`);
  t.is(fellThrough.status, 404);
  t.deepEqual(await fellThrough.json(), { outer: true });
  // Mounting gave the inner app prototypes of its own: the shared ones still lead straight to Node's.
  t.is(Object.getPrototypeOf(ServiceRequest.prototype), IncomingMessage.prototype);
  t.is(Object.getPrototypeOf(ServiceResponse.prototype), ServerResponse.prototype);
});

test('a response observer sees the head before it is written, each write, and takes the trailers and the usage report', async (t) => {
  const calls: string[] = [];
  const handOvers: Record<string, boolean> = {};
  const server = createServer({ IncomingMessage: ServiceRequest, ServerResponse: ServiceResponse }, (req, res) => {
    const response = res as ServiceResponse;
    if (req.url === '/watched') {
      const observer: ResponseObserver = {
        head(watched, args) {
          calls.push(`head ${String(args[0])} sent=${watched.headersSent}`);
          (args[1] as Record<string, string>)['x-added'] = 'by observer';
        },
        wrote: () => calls.push('write'),
        trailers: (trailers) => calls.push(`trailers ${JSON.stringify(trailers)}`),
        usage: (report) => calls.push(`usage ${report.model} ${report.total_tokens}`),
      };
      response.observer = observer;
    }
    // Only a watching caller takes a report as it is; over HTTP it has to travel encoded.
    const handOver = usageReportHandOver(res);
    handOvers[req.url!] = handOver !== undefined;
    handOver?.({ model: 'm', provider: null, prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 });
    res.writeHead(200, { 'content-type': 'text/plain', trailer: 'x-usage' });
    res.write('a');
    res.write('b');
    res.addTrailers({ 'x-usage': '42' });
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as AddressInfo).port;

  const watched = await readAll(port, '/watched');
  t.deepEqual(calls, ['usage m 3', 'head 200 sent=false', 'write', 'write', 'trailers {"x-usage":"42"}']);
  t.is(watched.headers['x-added'], 'by observer');
  t.is(watched.body, 'ab');
  t.deepEqual(watched.trailers, {});

  const plain = await readAll(port, '/plain');
  t.is(plain.headers['x-added'], undefined);
  t.deepEqual(plain.trailers, { 'x-usage': '42' });
  t.deepEqual(handOvers, { '/watched': true, '/plain': false });
});

test('close hooks: in order, once, after the answer or when the client leaves; one listener on a kit response, once() elsewhere', async (t) => {
  const ran: string[] = [];
  const listeners: Record<string, number> = {};
  let leftEarly!: () => void;
  const clientLeft = new Promise<void>((resolve) => (leftEarly = resolve));
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const path = req.url!;
    for (const n of [1, 2, 3]) whenClosed(res, () => ran.push(`${path} ${n} finished=${res.writableFinished}`));
    // A hook added by a hook is for a response that has closed: it never runs.
    whenClosed(res, () => whenClosed(res, () => ran.push(`${path} added late`)));
    listeners[path] = res.listenerCount('close');
    if (path.endsWith('/hang')) {
      whenClosed(res, leftEarly);
      req.socket.destroy();
      return;
    }
    res.end('ok');
  };
  const kit = createServer({ IncomingMessage: ServiceRequest, ServerResponse: ServiceResponse }, handler);
  const plain = createServer(handler);
  const ports: number[] = [];
  for (const server of [kit, plain]) {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
    ports.push((server.address() as AddressInfo).port);
  }

  const closed = (path: string) => ran.filter((line) => line.startsWith(`${path} `)).length === 3;
  for (const [port, name] of [[ports[0]!, '/kit'], [ports[1]!, '/plain']] as const) {
    t.is((await readAll(port, name)).body, 'ok');
    while (!closed(name)) await new Promise((resolve) => setImmediate(resolve));
  }
  t.deepEqual(ran, ['/kit 1 finished=true', '/kit 2 finished=true', '/kit 3 finished=true', '/plain 1 finished=true', '/plain 2 finished=true', '/plain 3 finished=true']);
  // Four hooks, one listener on the kit's response; the emitter's own once() per hook elsewhere.
  t.is(listeners['/kit'], 1);
  t.is(listeners['/plain'], 4);

  ran.length = 0;
  await t.throwsAsync(readAll(ports[0]!, '/kit/hang'));
  await clientLeft;
  t.deepEqual(ran, ['/kit/hang 1 finished=false', '/kit/hang 2 finished=false', '/kit/hang 3 finished=false']);
});

function readAll(port: number, path: string): Promise<{ headers: IncomingMessage['headers']; body: string; trailers: IncomingMessage['trailers'] }> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ headers: res.headers, body, trailers: res.trailers }));
      res.on('error', reject);
    }).on('error', reject);
  });
}
