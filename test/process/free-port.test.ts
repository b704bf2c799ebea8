import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import test from 'ava';
import { claimPort, claimsDir } from '../../scripts/free-port.mjs';
import { REPOSITORY_ROOT } from '../helpers/repository.js';
import { processAlive } from '../helpers/process.js';

// freePort's claims: a port one process was handed is never handed to another process on the
// machine while the first runs (two test files, or two runs, drawing the same port saw EADDRINUSE
// as the second child bound it). The ports here lie below the range freePort draws from, so no
// other process's draw meets them; each test takes one nobody has claimed.

const script = pathToFileURL(join(REPOSITORY_ROOT, 'scripts/free-port.mjs')).href;
const taken = new Set<number>();
const unclaimedPort = () => {
  for (;;) {
    const port = 1024 + Math.floor(Math.random() * 8000);
    if (taken.has(port) || existsSync(join(claimsDir, String(port)))) continue;
    taken.add(port);
    return port;
  }
};

/** Another process that claims `port`, says whether it got it, and exits as its stdin closes. */
async function otherClaimant(port: number) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', `
    const { claimPort } = await import(${JSON.stringify(script)});
    process.stdout.write(String(claimPort(${port})) + '\\n');
    process.stdin.resume();
    process.stdin.on('end', () => process.exit(0));
  `], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin!.on('error', () => {}); // EPIPE when the test killed it first
  const [line] = await once(child.stdout!, 'data');
  const exited = once(child, 'exit');
  return { got: String(line).trim() === 'true', pid: child.pid!, release: async () => { child.stdin!.end(); await exited; } };
}

test('a port claimed by a running process is not handed to another; its exit releases the claim', async (t) => {
  const port = unclaimedPort();
  const other = await otherClaimant(port);
  t.teardown(other.release);
  t.true(other.got, 'the first claim wins');
  t.is(readFileSync(join(claimsDir, String(port)), 'utf8'), String(other.pid));
  t.false(claimPort(port), 'a second process is refused while the first runs');

  await other.release();
  t.false(existsSync(join(claimsDir, String(port))), 'the claim is removed as its process exits');
  t.true(claimPort(port), 'then the port can be claimed again');
  t.false(claimPort(port), 'never handed out twice to one process either');
});

test('a claim left by a process that was killed is removed, and the port taken on a later draw', async (t) => {
  const port = unclaimedPort();
  const killed = await otherClaimant(port);
  t.true(killed.got);
  process.kill(killed.pid, 'SIGKILL');
  await killed.release();
  t.false(processAlive(killed.pid));
  t.true(existsSync(join(claimsDir, String(port))), 'a killed process cannot remove its claim');

  t.false(claimPort(port), 'the draw that finds a stale claim does not take the port');
  t.false(existsSync(join(claimsDir, String(port))), 'but removes the claim');
  t.true(claimPort(port));
});

test('a claim still being written (no owner yet) is left alone', (t) => {
  const port = unclaimedPort();
  mkdirSync(claimsDir, { recursive: true });
  writeFileSync(join(claimsDir, String(port)), '');
  t.teardown(() => rmSync(join(claimsDir, String(port)), { force: true }));
  t.false(claimPort(port));
  t.true(existsSync(join(claimsDir, String(port))));
});
