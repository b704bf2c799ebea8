import { createLogger, createServiceApp, listen, type ServiceAppOptions } from '../../services/kit/index.js';

/**
 * A kit service app built from a route table, listening on a free loopback port: a silent logger
 * and a 1 KiB default body limit unless the options say otherwise. Close it with `server.close()`.
 */
export async function listenKitApp(options: Omit<ServiceAppOptions, 'logger' | 'bodyLimit'> & Partial<Pick<ServiceAppOptions, 'logger' | 'bodyLimit'>>) {
  const app = createServiceApp({ logger: createLogger({ level: 'silent', name: options.name }), bodyLimit: 1024, ...options });
  const server = await listen(app, { host: '127.0.0.1', port: 0 });
  return { server, base: `http://127.0.0.1:${server.port}` };
}
