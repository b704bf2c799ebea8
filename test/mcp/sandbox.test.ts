import { readdirSync, readFileSync } from 'node:fs';
import test from 'ava';
import { TEST_DATABASE_URL } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from './helpers.js';

// Escape attempts against python_exec, through the edge with the SDK client. Each is refused or
// contained, and the service answers a normal call right after. Tests run as root on this
// machine, so the uid drop before the limits is what makes the fork bomb containment real.
let p: McpPlatform;
let key: string;
const UID_BASE = 61_000;

test.before(async () => {
  p = await startMcpPlatform({ SANDBOX_UID_BASE: String(UID_BASE), MCP_MAX_CONCURRENT_PYTHON: '2' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
});

async function run(code: string, timeout_ms = 10_000, stdin?: string): Promise<any> {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'python_exec', arguments: { code, timeout_ms, ...(stdin ? { stdin } : {}) } });
  if (result.isError) throw new Error(`python_exec error result: ${result.content[0].text}`);
  return result.structuredContent;
}

async function stillAnswers(t: import('ava').ExecutionContext) {
  const after = await run('print(6*7)');
  t.is(after.stdout, '42\n', 'the service answers a normal call afterwards');
}

/** Processes on this host owned by a sandbox uid (none should outlive a run). */
function sandboxProcesses(): number {
  return sandboxUids().count;
}

function sandboxUids(): Set<number> & { count: number } {
  const uids = Object.assign(new Set<number>(), { count: 0 });
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      if (uid >= UID_BASE && uid < UID_BASE + 16) {
        uids.add(uid);
        uids.count++;
      }
    } catch {
      // the process ended while we looked
    }
  }
  return uids;
}

test.serial('a socket to a local service (the PostgreSQL port) or the internet fails: there is no network', async (t) => {
  const port = new URL(TEST_DATABASE_URL).port || '5432';
  const out = await run(`
import socket
for host, port in (("127.0.0.1", ${port}), ("1.1.1.1", 53)):
    try:
        socket.create_connection((host, port), timeout=2)
        print("connected", host)
    except OSError as e:
        print("refused", host, type(e).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    print("resolved")
except OSError as e:
    print("no dns")
`);
  t.false(out.stdout.includes('connected'), out.stdout);
  t.regex(out.stdout, /refused 127\.0\.0\.1/);
  t.regex(out.stdout, /refused 1\.1\.1\.1/);
  t.regex(out.stdout, /no dns/);
  await stillAnswers(t);
});

test.serial("the service's files, /proc/1/environ and the environment hold nothing of the service; the file system is read-only", async (t) => {
  const cwd = process.cwd();
  const out = await run(`
import os, json
seen = {}
for path in (${JSON.stringify(`${cwd}/package.json`)}, ${JSON.stringify(`${cwd}/.data`)}, "/etc/passwd", "/root", "/work", "/proc/1/environ", "/proc/self/environ"):
    try:
        seen[path] = open(path, "rb").read().decode("utf-8", "replace") if not os.path.isdir(path) else os.listdir(path)
    except OSError as e:
        seen[path] = "ERR " + type(e).__name__
print(json.dumps({"files": seen, "env": dict(os.environ), "root": sorted(os.listdir("/")), "uid": os.getuid()}))
wrote = []
for path in ("/usr/evil.py", "/evil", "/sandbox/evil", "/dev/evil", "/proc/evil"):
    try:
        open(path, "w").write("x")
        wrote.append(path)
    except OSError:
        pass
print("wrote", wrote)
`);
  const [first, second] = out.stdout.trim().split('\n');
  const report = JSON.parse(first);
  t.regex(report.files[`${cwd}/package.json`], /^ERR /);
  t.regex(String(report.files[`${cwd}/.data`]), /^ERR /);
  t.regex(report.files['/etc/passwd'], /^ERR /);
  t.regex(String(report.files['/root']), /^ERR /);
  t.regex(String(report.files['/work']), /^ERR /);
  t.deepEqual(Object.keys(report.env).sort(), ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONIOENCODING']);
  t.deepEqual(report.root, ['dev', 'lib', 'lib64', 'proc', 'sandbox', 'tmp', 'usr'].filter((d) => report.root.includes(d)));
  t.not(report.uid, 0);
  const everything = out.stdout;
  for (const secret of [p.gatewaySecret, TEST_DATABASE_URL, 'GATEWAY_SHARED_SECRET', 'DATABASE_URL', p.adminKey]) t.false(everything.includes(secret), `leaked ${secret.slice(0, 12)}…`);
  t.is(second, 'wrote []', 'only /tmp and /dev/shm are writable');
  await stillAnswers(t);
});

test.serial('os.fork() in a loop is stopped by the process limit and killed at the timeout', async (t) => {
  const counted = await run(`
import os, time
n = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
    except OSError as e:
        print("fork refused after", n, e.errno)
        break
`, 3000);
  const forks = Number(/fork refused after (\d+) 11/.exec(counted.stdout)?.[1]);
  t.true(forks > 0 && forks < 32, counted.stdout);

  const bomb = await run('import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass', 2000);
  t.true(bomb.timed_out);
  t.not(bomb.exit_code, 0);
  await waitFor(() => sandboxProcesses() === 0, 10_000, 'every sandbox process gone');
  await stillAnswers(t);
});

test.serial('an infinite loop is killed at the timeout', async (t) => {
  const out = await run('while True:\n    pass', 1000);
  t.true(out.timed_out);
  t.is(out.exit_code, 137);
  t.regex(out.stderr, /timed out after 1000 ms/);
  await stillAnswers(t);
});

test.serial('allocating 4 GiB fails at the memory cap', async (t) => {
  const out = await run('b = bytearray(4 * 1024 ** 3)\nprint("allocated")');
  t.false(out.stdout.includes('allocated'));
  t.not(out.exit_code, 0);
  t.regex(out.stderr, /MemoryError/);
  await stillAnswers(t);
});

test.serial('writing a 1 GiB file fails at the file-size cap (and /tmp is small)', async (t) => {
  const out = await run(`
f = open("/tmp/big", "wb")
written = 0
try:
    for i in range(1024):
        f.write(b"x" * 1024 * 1024)
        written += 1
    print("wrote 1 GiB")
except OSError as e:
    print("stopped after", written, "MiB:", e.strerror)
`);
  t.false(out.stdout.includes('wrote 1 GiB'));
  t.regex(out.stdout, /stopped after \d+ MiB: (File too large|No space left on device)/);
  t.true(Number(/after (\d+)/.exec(out.stdout)?.[1]) <= 64);
  await stillAnswers(t);
});

test.serial('100 KiB of output is truncated to 64 KiB per stream', async (t) => {
  const out = await run('import sys\nsys.stdout.write("o" * 100 * 1024)\nsys.stderr.write("e" * 100 * 1024)');
  t.true(out.truncated);
  t.is(out.stdout.length, 64 * 1024);
  t.is(out.stderr.length, 64 * 1024);
  t.is(out.exit_code, 0);
  await stillAnswers(t);
});

test.serial('past the python_exec bound a call gets "busy, retry" at once instead of queueing', async (t) => {
  const client = await p.client(key);
  // Two users: one user holds at most half of the slots.
  const other = await p.client((await p.newUser()).key);
  const slow = (c: typeof client) => c.callTool({ name: 'python_exec', arguments: { code: 'import time\ntime.sleep(3)\nprint("done")', timeout_ms: 20_000 } });
  const running = [slow(client), slow(other)];
  // Both slots (MCP_MAX_CONCURRENT_PYTHON=2) are taken once both sandbox uids have a process.
  await waitFor(() => sandboxUids().size >= 2, 10_000, 'two sandboxes running');
  const third: any = await client.callTool({ name: 'python_exec', arguments: { code: 'print(1)' } });
  t.true(third.isError);
  t.regex(third.content[0].text, /every sandbox slot is in use.*retry/i);
  const results: any[] = await Promise.all(running);
  t.deepEqual(results.map((r) => r.structuredContent.stdout), ['done\n', 'done\n']);
  await stillAnswers(t);
});

test.serial('output cut at the cap inside a UTF-8 character leaves that character out instead of adding U+FFFD', async (t) => {
  const out = await run('import sys\nsys.stdout.buffer.write(b"a" * (64 * 1024 - 1) + "é".encode())\nsys.stderr.buffer.write(b"b" * (64 * 1024 - 2) + "😀".encode())');
  t.true(out.truncated);
  t.is(out.stdout, 'a'.repeat(64 * 1024 - 1));
  t.is(out.stderr, 'b'.repeat(64 * 1024 - 2));
  const whole = await run('print("é" * 10)');
  t.is(whole.stdout, `${'é'.repeat(10)}\n`, 'output under the cap is kept whole');
  t.false(whole.truncated);
});

test.serial('a detached child holding stdout dies with the run at the timeout; a signal exit is 128 + its number', async (t) => {
  const out = await run(`
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while True:
        time.sleep(0.05)
print("parent", flush=True)
time.sleep(60)
`, 1500);
  t.true(out.timed_out);
  t.is(out.exit_code, 137);
  t.is(out.stdout, 'parent\n');
  await waitFor(() => sandboxProcesses() === 0, 10_000, 'the detached child is gone');
  const term = await run('import os, signal\nos.kill(os.getpid(), signal.SIGTERM)');
  t.is(term.exit_code, 143);
  t.false(term.timed_out);
});

test.serial('1 MB of stdin the program never reads does not block the run', async (t) => {
  const out = await run('print("ignored stdin")', 10_000, 'x'.repeat(1_000_000));
  t.is(out.stdout, 'ignored stdin\n');
  t.is(out.exit_code, 0);
  const read = await run('import sys\nprint(len(sys.stdin.read()))', 10_000, 'é'.repeat(400_000));
  t.is(read.stdout, '400000\n');
});
