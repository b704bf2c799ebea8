import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// A multipart upload has at most 12 parts, the `file` part and every field included. busboy
// signals its parts limit when a part reaches it, and drops fields past its own field limit
// without a word: a body of exactly 12 parts was refused as "too many parts", and an 11th field
// (a `filename` among them) would have been lost.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const BOUNDARY = 'XB7partsLimitBoundary';
const CRLF = '\r\n';

function field(name: string, value: string): Buffer {
  return Buffer.from(`--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"${CRLF}${CRLF}${value}`);
}
function file(name: string, data: Buffer, filename: string): Buffer {
  const head = `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"; filename="${filename}"${CRLF}Content-Type: image/png${CRLF}${CRLF}`;
  return Buffer.concat([Buffer.from(head), data]);
}
const form = (parts: Buffer[]) => Buffer.concat([...parts.flatMap((x) => [x, Buffer.from(CRLF)]), Buffer.from(`--${BOUNDARY}--${CRLF}`)]);

async function send(headers: Record<string, string>, body: Buffer) {
  const res = await fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: { ...headers, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }, body });
  return { status: res.status, body: (await res.json()) as any };
}

const otherFields = (n: number) => Array.from({ length: n }, (_, i) => field(`note${i}`, `value ${i}`));

test('a body of exactly 12 parts is stored, its filename field (the 11th field) kept', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 6, 5, 61);
  const res = await send(user.headers, form([...otherFields(10), field('filename', 'from-the-field.png'), file('file', png, 'from-the-part.png')]));
  t.is(res.status, 201, JSON.stringify(res.body));
  t.like(res.body, { object: 'media', width: 6, height: 5, filename: 'from-the-field.png' });
  // The file part first and 11 fields after it: 12 parts as well.
  const png2 = await solidImage('png', 6, 5, 62);
  const after = await send(user.headers, form([file('file', png2, 'part.png'), ...otherFields(10), field('filename', 'last-field.png')]));
  t.is(after.status, 201, JSON.stringify(after.body));
  t.is(after.body.filename, 'last-field.png');
});

test('a 13th part is refused as too many parts, naming file; nothing is stored', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 6, 5, 63);
  for (const parts of [
    [...otherFields(12), file('file', png, 'a.png')],
    [file('file', png, 'a.png'), ...otherFields(12)],
    [...otherFields(11), field('filename', 'x.png'), file('file', png, 'a.png')],
  ]) {
    const res = await send(user.headers, form(parts));
    t.is(res.status, 400, JSON.stringify(res.body));
    t.like(res.body.error, { type: 'invalid_request_error', param: 'file' });
    t.regex(res.body.error.message, /Too many parts/);
  }
  t.truthy(user.userId);
  const [row] = await p.runtime.db.knex('media').where({ user_id: user.userId }).count({ n: '*' });
  t.is(Number(row!.n), 0);
});
