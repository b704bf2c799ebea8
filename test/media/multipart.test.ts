import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import test from 'ava';
import { cleanFilename } from '../../services/media-api/media/sources.js';
import { waitFor } from '../helpers/wait.js';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// Multipart uploads that are cut off, malformed or unusual, and file names outside ASCII. A body
// that ends inside a part once raised an unhandled 'error' on busboy's part stream and took the
// process (here: the test's process, where the platform runs) down; every case below is followed
// by a request proving the service still answers.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const BOUNDARY = 'XB7mediaTestBoundary';
const CRLF = '\r\n';

/** One part: headers, a blank line, the data (no trailing CRLF: the next delimiter adds it). */
function part(name: string, data: Buffer | string, filename?: string, type = 'application/octet-stream'): Buffer {
  const disposition = `form-data; name="${name}"${filename === undefined ? '' : `; filename="${filename}"`}`;
  const headers = `--${BOUNDARY}${CRLF}Content-Disposition: ${disposition}${CRLF}${filename === undefined ? '' : `Content-Type: ${type}${CRLF}`}${CRLF}`;
  return Buffer.concat([Buffer.from(headers, 'utf8'), Buffer.isBuffer(data) ? data : Buffer.from(data, 'utf8')]);
}
/** A well-formed body of these parts. */
const form = (...parts: Buffer[]) => Buffer.concat([...parts.flatMap((x) => [x, Buffer.from(CRLF)]), Buffer.from(`--${BOUNDARY}--${CRLF}`)]);

async function send(headers: Record<string, string>, body: Buffer) {
  const res = await fetch(`${p.url}/v1/media/upload`, {
    method: 'POST',
    headers: { ...headers, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
    body,
  });
  const text = await res.text();
  let json: any = text;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: the assertions below show it
  }
  return { status: res.status, body: json };
}

function expectFileError(t: any, res: { status: number; body: any }, message: RegExp) {
  t.is(res.status, 400, JSON.stringify(res.body));
  t.is(res.body.error?.type, 'invalid_request_error');
  t.is(res.body.error?.param, 'file');
  t.regex(res.body.error?.message ?? '', message);
  t.truthy(res.body.error?.request_id);
}

const mediaCount = async (userId: string) => {
  const [row] = await p.runtime.db.knex('media').where({ user_id: userId }).count({ n: '*' });
  return Number(row!.n);
};

/** The service still answers: a valid multipart upload is stored. */
async function stillAnswers(t: any, headers: Record<string, string>, seed: number) {
  const ok = await send(headers, form(part('file', await solidImage('png', 5, 5, seed), 'ok.png', 'image/png')));
  t.is(ok.status, 201, JSON.stringify(ok.body));
  return ok.body;
}

test('a body cut off inside the file part, a skipped part or a field is a 400 naming file; the service goes on answering', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 6, 6, 1);
  const cases: Array<[string, Buffer]> = [
    ['inside the file part', part('file', png.subarray(0, 8), 'a.png', 'image/png')],
    ['inside the file part, right after its headers', part('file', '', 'a.png', 'image/png')],
    ['inside a skipped file part', part('other', Buffer.alloc(2000, 7), 'skip.bin')],
    ['inside a skipped part, after a complete file part', Buffer.concat([part('file', png, 'a.png', 'image/png'), Buffer.from(CRLF), part('other', 'zzz', 'skip.bin')])],
    ['inside a field', part('filename', 'half-a-na')],
    ['inside the part headers', Buffer.from(`--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="fi`)],
  ];
  for (const [what, body] of cases) {
    expectFileError(t, await send(user.headers, body), /Malformed multipart\/form-data body/);
    t.pass(what);
  }
  // Nothing was stored or left behind, and the service (in this process) is alive.
  t.is(await mediaCount(user.userId), 0);
  const stored = await stillAnswers(t, user.headers, 2);
  t.is(stored.filename, 'ok.png');
  // The platform's own writes (the upload just stored, the media worker's) pass through temp files
  // too, so a look at one instant can see theirs: a temp file left behind is one that never goes.
  const noTempFile = async () => !(await readdir(join(p.dataDir, 'media', 'objects'), { recursive: true })).some((name) => name.endsWith('.tmp'));
  t.true(await waitFor(noTempFile, undefined, 'no temp file left behind'));
});

test('a body with no parts at all, or garbage, is a 400 naming file', async (t) => {
  const user = await p.newUser();
  expectFileError(t, await send(user.headers, Buffer.alloc(0)), /Malformed|Missing required part/);
  expectFileError(t, await send(user.headers, Buffer.from('this is not multipart at all')), /Malformed|Missing required part/);
  await stillAnswers(t, user.headers, 3);
});

test('parts named other than file are skipped, before or after it; two file parts are a 400 naming file', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 7, 4, 4);
  const otherFirst = await send(user.headers, form(part('other', Buffer.alloc(100, 1), 'other.bin'), part('file', png, 'real.png', 'image/png')));
  t.is(otherFirst.status, 201, JSON.stringify(otherFirst.body));
  t.like(otherFirst.body, { width: 7, height: 4, filename: 'real.png' });

  const gif = await solidImage('gif', 3, 3, 5);
  const otherAfter = await send(user.headers, form(part('note', 'hello'), part('file', gif, 'g.gif', 'image/gif'), part('thumb', png, 'thumb.png', 'image/png')));
  t.is(otherAfter.status, 201, JSON.stringify(otherAfter.body));
  t.like(otherAfter.body, { mime_type: 'image/gif', filename: 'g.gif' });

  const two = await send(user.headers, form(part('file', await solidImage('png', 8, 8, 6), 'one.png', 'image/png'), part('file', await solidImage('png', 8, 8, 7), 'two.png', 'image/png')));
  expectFileError(t, two, /Only one 'file' part/);
  t.is(await mediaCount(user.userId), 2, 'neither of the two files was stored');

  const onlyOther = await send(user.headers, form(part('other', png, 'x.png', 'image/png')));
  expectFileError(t, onlyOther, /Missing required part: 'file'/);
  await stillAnswers(t, user.headers, 8);
});

test('a file part sent without a filename (busboy reads it as a text field) is a 400 saying it must be a file part, not that it is missing', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 6, 5, 12);
  // An image with its own Content-Type but no `filename=` in the Content-Disposition.
  const withType = Buffer.concat([Buffer.from(`--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="file"${CRLF}Content-Type: image/png${CRLF}${CRLF}`), png]);
  for (const body of [form(withType), form(part('file', 'some text')), form(part('filename', 'cat.png'), part('file', png))]) {
    const res = await send(user.headers, body);
    expectFileError(t, res, /The 'file' part must be a file part: send it with a non-empty filename/);
    t.notRegex(res.body.error.message, /Missing required part/);
  }
  t.is(await mediaCount(user.userId), 0);
  await stillAnswers(t, user.headers, 13);
});

test('a file part sent with filename="" and a Content-Type other than octet-stream is a 400 that names the empty filename', async (t) => {
  const user = await p.newUser();
  const res = await send(user.headers, form(part('file', await solidImage('png', 6, 5, 14), '', 'image/png')));
  expectFileError(t, res, /non-empty filename/);
  t.regex(res.body.error.message, /filename="" is read as a text field/);
  t.is(await mediaCount(user.userId), 0);
  // A browser's form with no file chosen: filename="" and an empty octet-stream body.
  const browser = await send(user.headers, form(part('file', '', '', 'application/octet-stream')));
  t.is(browser.status, 400, JSON.stringify(browser.body));
  t.is(browser.body.error.param, 'file');
  t.regex(browser.body.error.message, /empty \(0 bytes\)/);
  t.is(await mediaCount(user.userId), 0);
});

test('raw UTF-8 file names (as browsers and curl send them) and RFC 5987 names are kept, emoji included', async (t) => {
  const user = await p.newUser();
  const name = '日本語😀.png';
  const raw = await send(user.headers, form(part('file', await solidImage('png', 5, 6, 9), name, 'image/png')));
  t.is(raw.status, 201, JSON.stringify(raw.body));
  t.is(raw.body.filename, name);

  const extended = Buffer.concat([
    Buffer.from(`--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="file"; filename*=UTF-8''${encodeURIComponent('café 🐈.png')}${CRLF}Content-Type: image/png${CRLF}${CRLF}`),
    await solidImage('png', 5, 7, 10),
    Buffer.from(`${CRLF}--${BOUNDARY}--${CRLF}`),
  ]);
  const star = await send(user.headers, extended);
  t.is(star.status, 201, JSON.stringify(star.body));
  t.is(star.body.filename, 'café 🐈.png');

  const field = await send(user.headers, form(part('filename', 'Ünïcødé ✓ 🎉.png'), part('file', await solidImage('png', 5, 8, 11), 'ignored.png', 'image/png')));
  t.is(field.status, 201, JSON.stringify(field.body));
  t.is(field.body.filename, 'Ünïcødé ✓ 🎉.png');

  // The download names it too (RFC 5987 form, ASCII fallback).
  const link = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: raw.body.id });
  const download = await fetch(link.body.url);
  t.is(download.status, 200);
  t.true(download.headers.get('content-disposition')!.includes(`filename*=UTF-8''${encodeURIComponent(name)}`));
});

test('JSON uploads: emoji kept, control and bidirectional override/isolate characters removed', async (t) => {
  const user = await p.newUser();
  const upload = async (filename: string, seed: number) =>
    postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 4, 4, seed)).toString('base64') }, filename });
  const emoji = await upload('photo 😀.png', 20);
  t.is(emoji.status, 201, JSON.stringify(emoji.body));
  t.is(emoji.body.filename, 'photo 😀.png');

  const spoof = await upload('\u202Egnp.exe', 21);
  t.is(spoof.status, 201, JSON.stringify(spoof.body));
  t.is(spoof.body.filename, 'gnp.exe');
  const link = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: spoof.body.id });
  const disposition = (await fetch(link.body.url)).headers.get('content-disposition')!;
  t.false(/%E2%80%AE|\u202e/i.test(disposition), disposition);

  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: 100, filename: 'a\u2066b\u2069c 🐈.png' });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  t.is((await p.runtime.db.knex('media').where({ id: reserve.body.id }).first()).filename, 'abc 🐈.png');
});

test('cleanFilename: last path segment; controls (C0, DEL, C1), bidi overrides and isolates, lone surrogates go; pairs are never split', (t) => {
  t.is(cleanFilename('photo 😀.png'), 'photo 😀.png');
  t.is(cleanFilename('日本語😀.png'), '日本語😀.png');
  t.is(cleanFilename('../../etc/passwd'), 'passwd');
  t.is(cleanFilename('..\\..\\win.ini'), 'win.ini');
  t.is(cleanFilename('a\r\nb\u0000c\u007fd\u0085e\u009f.png'), 'abcde.png');
  for (const mark of ['\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069']) {
    t.is(cleanFilename(`x${mark}y.png`), 'xy.png', `U+${mark.codePointAt(0)!.toString(16)}`);
  }
  t.is(cleanFilename('a\ud800b\udc00c.png'), 'abc.png', 'lone surrogates go');
  t.is(cleanFilename('\u202e\u0001'), null, 'nothing left');
  t.is(cleanFilename(''), null);
  t.is(cleanFilename(null), null);
  const long = cleanFilename(`${'a'.repeat(254)}😀😀.png`)!;
  t.is(Array.from(long).length, 255);
  t.true(long.endsWith('😀'), 'the pair at the cut is whole');
  t.is(cleanFilename('😀'.repeat(300))!, '😀'.repeat(255));
});
