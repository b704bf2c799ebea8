import test from 'ava';
import { MAX_REFERENCES } from '../../services/media-api/media/resolve.js';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// `POST /v1/media/resolve` looked every distinct reference up in one query. Some 70,000 ids (about
// 3 MB of JSON, well under the route's 16 MiB body limit) overflowed PostgreSQL's 65,535 bind
// parameters, and the error, a protocol violation, was answered as a 503 outage. The number of
// distinct references is now bounded, with a 400 naming `payload`.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const idOf = (n: number) => `jan_${String(n).padStart(26, '0')}`;
const resolve = (headers: Record<string, string>, payload: unknown) => postJson(`${p.url}/v1/media/resolve`, headers, { payload });

test('too many distinct references: 400 naming payload, whatever the number', async (t) => {
  const user = await p.newUser();
  for (const count of [MAX_REFERENCES + 1, 70_000]) {
    const payload = { input: Array.from({ length: count }, (_, i) => ({ type: 'input_image', image_url: idOf(i) })) };
    const res = await resolve(user.headers, payload);
    t.is(res.status, 400, `${count}: ${JSON.stringify(res.body).slice(0, 300)}`);
    t.is(res.body.error?.type, 'invalid_request_error');
    t.is(res.body.error?.param, 'payload');
    t.regex(res.body.error?.message ?? '', new RegExp(`${count} distinct media; at most ${MAX_REFERENCES}`));
  }
});

test('up to the limit, references are looked up; repeats of one id count once', async (t) => {
  const user = await p.newUser();
  const unknown = { input: Array.from({ length: MAX_REFERENCES }, (_, i) => ({ type: 'input_image', image_url: idOf(i) })) };
  const res = await resolve(user.headers, unknown);
  t.is(res.status, 404, JSON.stringify(res.body).slice(0, 300));
  t.is(res.body.error.param, 'payload');

  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 3, 3, 150)).toString('base64') } });
  t.is(up.status, 201);
  const repeated = { input: Array.from({ length: MAX_REFERENCES * 3 }, () => ({ type: 'input_image', image_url: up.body.id })) };
  const ok = await resolve(user.headers, repeated);
  t.is(ok.status, 200, JSON.stringify(ok.body).slice(0, 300));
  t.is(ok.body.payload.input.length, MAX_REFERENCES * 3);
  t.regex(ok.body.payload.input[MAX_REFERENCES * 3 - 1].image_url, /\/v1\/media\/signed\//);
});
