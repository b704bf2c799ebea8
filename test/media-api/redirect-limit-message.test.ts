import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';
import { startImageServer } from '../media/image-server.js';

// A URL source that redirects more often than MEDIA_FETCH_MAX_REDIRECTS is refused with the message
// docs/media.md gives ("redirected more than N times"), not the egress guard's bare reason ("The URL
// is not allowed: too many redirects"), which read as if the destination itself were forbidden.
let p: MediaPlatform;
let images: Awaited<ReturnType<typeof startImageServer>>;
test.before(async () => {
  images = await startImageServer();
  p = await startMediaPlatform({ EGRESS_ALLOW_HOSTS: 'localhost', MEDIA_FETCH_MAX_REDIRECTS: '2', MEDIA_SWEEP_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
  await images?.close();
});

const hops = (target: string, n: number) => {
  let url = target;
  for (let i = 0; i < n; i++) url = `http://localhost:${images.port}/redirect?to=${encodeURIComponent(url)}`;
  return url;
};

test('one redirect past MEDIA_FETCH_MAX_REDIRECTS is a 400 naming source.url that says how many were allowed', async (t) => {
  const user = await p.newUser();
  const target = images.serve('hops.png', await solidImage('png', 5, 5, 202));
  const refused = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'url', url: hops(target, 3) } });
  t.is(refused.status, 400, JSON.stringify(refused.body));
  t.like(refused.body.error, { type: 'invalid_request_error', param: 'source.url', message: 'The URL redirected more than 2 times' });
  const ok = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'url', url: hops(target, 2) } });
  t.is(ok.status, 201, JSON.stringify(ok.body));
});
