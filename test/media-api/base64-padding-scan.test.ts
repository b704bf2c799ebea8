import test from 'ava';
import { decodeBase64 } from '../../services/media-api/media/sources.js';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// The base64 decoder cut the padding with `/=+$/`, a regex tried from every `=` that runs to the
// end of the string each time: a body of a long run of `=` followed by one other character cost
// time quadratic in its length (80 KB: 8 s; 1 MB: about 20 minutes) on media-api's event loop,
// from any user (a guest included), through `base64` and `data_url` sources alike (and llm-api's
// inline chat images, which it stores through the same route). The padding is now cut by a scan
// from the end: such a body is refused at once as not base64, and the server goes on serving.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform({ MEDIA_SWEEP_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

const RUN = 1_000_000;

test('a long run of = that is not at the end is refused as not base64, naming the field, and the service keeps answering', async (t) => {
  const user = await p.newUser();
  const hostile = `${'='.repeat(RUN)}A`;
  for (const [source, param] of [
    [{ type: 'base64', data: hostile }, 'source.data'],
    [{ type: 'data_url', data_url: `data:image/png;base64,${hostile}` }, 'source.data_url'],
    [{ type: 'base64', data: `data:image/png;base64,${hostile}` }, 'source.data'],
  ] as const) {
    const res = await postJson(`${p.url}/v1/media/upload`, user.headers, { source });
    t.is(res.status, 400, JSON.stringify(res.body).slice(0, 300));
    t.like(res.body.error, { type: 'invalid_request_error', param });
    t.regex(res.body.error.message, /not valid base64/);
  }
  // The same service still stores an image right after.
  const png = await solidImage('png', 6, 6, 201);
  const ok = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
  t.is(ok.status, 201, JSON.stringify(ok.body));
});

test('the padding scan keeps the padding rules: trailing = complete the last group, nothing else', (t) => {
  t.deepEqual(decodeBase64('QQ==', 10, 'x'), Buffer.from('A'));
  t.deepEqual(decodeBase64('QUI=', 10, 'x'), Buffer.from('AB'));
  t.deepEqual(decodeBase64('QUI', 10, 'x'), Buffer.from('AB'));
  t.deepEqual(decodeBase64(' Q U\nI = ', 10, 'x'), Buffer.from('AB'));
  t.deepEqual(decodeBase64('', 10, 'x'), Buffer.alloc(0));
  for (const bad of ['QQ=', 'QUJD=', 'QQ===', '=', '====', `${'='.repeat(RUN)}A`, 'Q=Q=', 'A'.repeat(5)]) {
    const error = t.throws(() => decodeBase64(bad, 10_000_000, 'source.data'), undefined, bad.slice(0, 20));
    t.regex(error!.message, /not valid base64/, bad.slice(0, 20));
  }
  t.regex(t.throws(() => decodeBase64('QUJDRA', 3, 'source.data'))!.message, /size limit of 3 bytes/);
});
