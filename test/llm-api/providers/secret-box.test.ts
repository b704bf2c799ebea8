import test from 'ava';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, createSecretBox, loadMasterKey, parseMasterKey } from '../../../services/kit/index.js';

const key = Buffer.alloc(32, 7);

test('seal/open round trip; every seal uses a fresh nonce', (t) => {
  const box = createSecretBox(key);
  const a = box.seal('sk-secret', 'prov_1');
  const b = box.seal('sk-secret', 'prov_1');
  t.not(a, b);
  t.regex(a, /^v1\.[\w-]+\.[\w-]+\.[\w-]+$/);
  t.false(a.includes('sk-secret'));
  t.is(box.open(a, 'prov_1'), 'sk-secret');
});

test('tampering, another owner (aad) or another key fails to open', (t) => {
  const box = createSecretBox(key);
  const sealed = box.seal('sk-secret', 'prov_1');
  const parts = sealed.split('.');
  const flipped = Buffer.from(parts[3]!, 'base64url');
  flipped[0]! ^= 1;
  t.throws(() => box.open([parts[0], parts[1], parts[2], flipped.toString('base64url')].join('.'), 'prov_1'));
  t.throws(() => box.open(sealed, 'prov_2'));
  t.throws(() => createSecretBox(Buffer.alloc(32, 8)).open(sealed, 'prov_1'));
  t.throws(() => box.open('not sealed'));
});

test('a tag cut short (GCM checks only the bytes it is given) does not open: only the full 16 bytes do', (t) => {
  const box = createSecretBox(key);
  const parts = box.seal('sk-secret', 'prov_1').split('.');
  for (const bytes of [4, 8, 12, 15]) {
    const short = Buffer.from(parts[2]!, 'base64url').subarray(0, bytes).toString('base64url');
    t.throws(() => box.open([parts[0], parts[1], short, parts[3]].join('.'), 'prov_1'), { message: 'not a sealed value' });
  }
});

test('MASTER_KEY: hex or base64 of 32 bytes; anything else is a config error', (t) => {
  t.deepEqual(parseMasterKey('07'.repeat(32)), key);
  t.deepEqual(parseMasterKey(key.toString('base64')), key);
  t.deepEqual(parseMasterKey(key.toString('base64url')), key);
  t.throws(() => parseMasterKey('too-short-but-32-characters-long!'), { instanceOf: ConfigError });
});

test('embedded default: generated once under DATA_DIR (0600) and reused', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mk-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = loadMasterKey({ DATA_DIR: dir });
  const second = loadMasterKey({ DATA_DIR: dir });
  t.deepEqual(first, second);
  t.is(first.length, 32);
  t.is(statSync(join(dir, 'master.key')).mode & 0o777, 0o600);
  t.is(readFileSync(join(dir, 'master.key'), 'utf8').trim(), first.toString('hex'));
  t.deepEqual(loadMasterKey({ DATA_DIR: dir, MASTER_KEY: key.toString('hex') }), key);
});
