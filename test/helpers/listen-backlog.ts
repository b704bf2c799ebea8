import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/**
 * The backlog of the socket listening on 127.0.0.1:<port>, as the kernel holds it (`ss` reports a
 * listener's maximum accept queue as its Send-Q), or NaN when nothing listens there.
 */
export function listenBacklog(port: number): number {
  const out = execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' });
  const line = out.split('\n').find((l) => l.includes(`127.0.0.1:${port}`));
  return line ? Number(line.trim().split(/\s+/)[2]) : Number.NaN;
}

/** The kernel's cap on any listen backlog (net.core.somaxconn). */
export const somaxconn = () => Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8').trim());
