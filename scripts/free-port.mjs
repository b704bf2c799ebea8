import net from 'node:net';
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A free TCP port on 127.0.0.1 for a process that will bind it later (a child process, a server of
 * a test's own). Ports are drawn at random from below the kernel's ephemeral range: a port that
 * `listen(0)` released can be taken by any outgoing connection before the child binds it (seen as
 * EADDRINUSE in the cluster test under load), while a port outside that range is only ever taken by
 * a process that asks for it by number.
 *
 * Between the draw and the child's bind, another process drawing from the same range (the other
 * test file running alongside, a second run on the same machine) could be handed the same port:
 * seen as EADDRINUSE in the supervisor test. So each port handed out is also claimed, by a file in
 * a directory every process on the machine shares, created exclusively and removed as the claiming
 * process exits.
 */
export async function freePort() {
  const [low, high] = portRange();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (claimPort(port) && (await bindable(port))) return port;
  }
  throw new Error(`no free port between ${low} and ${high} after 100 tries`);
}

export const claimsDir = join(tmpdir(), `free-port-claims-${process.getuid?.() ?? 'user'}`);
/** The claim files of this process: removed as it exits (a port is never handed out twice). */
const claims = new Set();
process.on('exit', () => {
  for (const file of claims) {
    try {
      unlinkSync(file);
    } catch {
      // Already gone: nothing to release.
    }
  }
});

/** True when this process now holds the claim on `port`; false when another (or this) one does. */
export function claimPort(port) {
  const file = join(claimsDir, String(port));
  if (claims.has(file)) return false;
  try {
    mkdirSync(claimsDir, { recursive: true });
    writeFileSync(file, String(process.pid), { flag: 'wx' });
    claims.add(file);
    return true;
  } catch (error) {
    if (error.code !== 'EEXIST') throw error;
  }
  // A claim left by a process that no longer runs (killed before it could remove it) is removed,
  // but the port is not taken on this draw: two processes finding the same stale claim at once then
  // cannot both take it.
  let owner = 0;
  try {
    owner = Number(readFileSync(file, 'utf8'));
  } catch {
    // Removed meanwhile.
  }
  if (owner > 0 && !processRunning(owner)) {
    try {
      unlinkSync(file);
    } catch {
      // Removed meanwhile.
    }
  }
  return false;
}

/** True while a process with this pid exists (signal 0 checks without sending anything). */
export function processRunning(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: a process of another user has that pid now, so it runs.
    return error.code === 'EPERM';
  }
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
