import { randomBytes } from 'node:crypto';
import test from 'ava';
import { createUrlSigner } from '../../domains/media/index.js';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// A signed-URL parameter given twice is parsed as a list. The signer read a list as "absent", so a
// download URL signed without a file name (every upload that names none) still verified with
// `&fn=a&fn=b` appended, and the route then built Content-Disposition from the list: a 500
// internal_error from a public route, for anybody holding the URL. Now a repeated parameter is a
// malformed URL: 403 naming `sig`, like any other tampering.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform({ MEDIA_SWEEP_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

test('the signer refuses a signed parameter given as a list', (t) => {
  const signer = createUrlSigner(randomBytes(32));
  const key = `objects/ab/${'ab'.repeat(32)}`;
  const now = 1_800_000_000;
  const query = Object.fromEntries(new URLSearchParams(signer.query({ method: 'GET', key, exp: now + 60, ct: 'image/png' })));
  t.is(signer.verify('GET', key, query, now), null);
  for (const field of ['fn', 'len', 'ct', 'exp', 'sig']) {
    const value = query[field] ?? 'x';
    t.is(signer.verify('GET', key, { ...query, [field]: [value, value] }, now), 'malformed signed URL', field);
  }
});

test('through the edge: a download URL with a repeated parameter is a 403 naming sig, GET and HEAD; the URL itself still works', async (t) => {
  const user = await p.newUser();
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 6, 6, 203)).toString('base64') } });
  t.is(up.status, 201, JSON.stringify(up.body));
  const url: string = up.body.url;
  t.false(new URL(url).searchParams.has('fn'), 'signed without a file name');
  for (const extra of ['&fn=a&fn=b', '&fn=a.html&fn=a.html', '&len=1&len=1']) {
    const res = await fetch(url + extra);
    t.is(res.status, 403, extra);
    const body = (await res.json()) as any;
    t.like(body.error, { type: 'permission_error', param: 'sig' }, extra);
    t.regex(body.error.message, /malformed signed URL/, extra);
    t.is((await fetch(url + extra, { method: 'HEAD' })).status, 403, `HEAD ${extra}`);
  }
  const ok = await fetch(url);
  t.is(ok.status, 200);
  t.is(ok.headers.get('content-type'), 'image/png');
  await ok.arrayBuffer();
});
