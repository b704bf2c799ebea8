import net from 'node:net';

/**
 * A TCP proxy between code under test and a real server, to simulate outages without stopping
 * the shared server: `cut()` drops every connection and refuses new ones, `stall()` stops
 * forwarding bytes while keeping sockets open, `resume()` returns to normal.
 */
export interface FaultProxy {
  port: number;
  url(scheme: string, auth?: string): string;
  cut(): void;
  stall(): void;
  resume(): void;
  connections(): number;
  /** Bytes clients sent that a stall holds back (a request waiting at the proxy). */
  heldBytes(): number;
  close(): Promise<void>;
}

export async function startFaultProxy(target: { host: string; port: number }): Promise<FaultProxy> {
  let mode: 'open' | 'cut' | 'stall' = 'open';
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  const server = net.createServer((client) => {
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
    if (mode === 'stall') {
      client.pause();
      upstream.pause();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const proxy: FaultProxy = {
    port,
    url: (scheme, auth) => `${scheme}://${auth ? `${auth}@` : ''}127.0.0.1:${port}`,
    cut() {
      mode = 'cut';
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    stall() {
      mode = 'stall';
      for (const { client, upstream } of pairs) {
        client.pause();
        upstream.pause();
      }
    },
    resume() {
      mode = 'open';
      for (const { client, upstream } of pairs) {
        client.resume();
        upstream.resume();
      }
    },
    connections: () => pairs.size,
    heldBytes: () => [...pairs].reduce((sum, { client }) => sum + client.readableLength, 0),
    async close() {
      proxy.cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}

/** A fault proxy in front of the server a URL names; `proxiedUrl` is that URL through the proxy. */
export interface UrlFaultProxy extends FaultProxy {
  proxiedUrl: string;
}

/** In front of the server at `serverUrl` (on `defaultPort` when it names none); credentials, path and options are kept in `proxiedUrl`. */
export async function startFaultProxyFor(serverUrl: string, defaultPort: number): Promise<UrlFaultProxy> {
  const target = new URL(serverUrl);
  const proxy = await startFaultProxy({ host: target.hostname, port: Number(target.port || defaultPort) });
  const proxied = new URL(serverUrl);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  return Object.assign(proxy, { proxiedUrl: proxied.toString() });
}
