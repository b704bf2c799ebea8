import net from 'node:net';
import { readFileSync } from 'node:fs';

/**
 * A free TCP port on 127.0.0.1 for a process that will bind it later (a child process, a server of
 * a test's own). Ports are drawn at random from below the kernel's ephemeral range: a port that
 * `listen(0)` released can be taken by any outgoing connection before the child binds it (seen as
 * EADDRINUSE in the cluster test under load), while a port outside that range is only ever taken by
 * a process that asks for it by number.
 */
/** Every port this process was given, so two servers it starts at once never get the same one. */
const handedOut = new Set();

export async function freePort() {
  const [low, high] = portRange();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    // A port handed out earlier may not be bound yet (a platform still starting): never twice.
    if (handedOut.has(port) || !(await bindable(port)) || handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port between ${low} and ${high} after 100 tries`);
}

function portRange() {
  let ephemeralLow = 32768;
  try {
    ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || ephemeralLow;
  } catch {
    // Not Linux: keep the common default.
  }
  // Well below the ephemeral range and above the registered services most machines run.
  const high = Math.min(ephemeralLow, 32768);
  return [Math.max(10000, high - 12000), high];
}

function bindable(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}
