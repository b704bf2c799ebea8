import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// Both ways to download the stored bytes, `GET /v1/media/{id}/content` (on the API's own origin)
// and a signed URL, carry the stored image type, `nosniff` and a sandbox Content-Security-Policy,
// as docs/media.md says: the content route had no CSP, so nothing but the image type stood
// between a stored object and a document running on the API origin.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform({ MEDIA_SWEEP_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

test('the content route and the signed URL both answer with the image type, nosniff and a sandbox CSP', async (t) => {
  const user = await p.newUser();
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('gif', 6, 6, 204)).toString('base64') } });
  t.is(up.status, 201, JSON.stringify(up.body));
  const downloads: Array<[string, RequestInit]> = [
    [`${p.url}/v1/media/${up.body.id}/content`, { headers: user.headers }],
    [`${p.url}/v1/media/${up.body.id}/content`, { headers: user.headers, method: 'HEAD' }],
    [up.body.url, {}],
    [up.body.url, { method: 'HEAD' }],
  ];
  for (const [url, init] of downloads) {
    const res = await fetch(url, init);
    const what = `${init.method ?? 'GET'} ${new URL(url).pathname}`;
    t.is(res.status, 200, what);
    t.is(res.headers.get('content-type'), 'image/gif', what);
    t.is(res.headers.get('x-content-type-options'), 'nosniff', what);
    t.is(res.headers.get('content-security-policy'), "default-src 'none'; sandbox", what);
    await res.arrayBuffer();
  }
});
