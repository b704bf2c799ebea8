import test from 'ava';
import { startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// A JSON body that is not an object (an array, a string, a number, a boolean, null) is refused as a
// whole on every media route that reads JSON: a 400 naming `body`, as a malformed or oversized body
// is named, never a 400 whose `param` is null. An empty body still names the first missing field.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const NOT_OBJECTS = ['[]', '[{"media_id":"jan_x"}]', '"media_id"', '42', 'true', 'null'];
const ROUTES = ['/v1/media/presigned-url', '/v1/media/upload', '/v1/media/resolve', '/llm/v1/media/presigned-url'];

async function post(path: string, headers: Record<string, string>, text: string) {
  const res = await fetch(`${p.url}${path}`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: text });
  return { status: res.status, body: (await res.json()) as any };
}

test('a JSON body that is not an object is a 400 naming body on every JSON media route', async (t) => {
  const user = await p.newUser();
  for (const path of ROUTES) {
    for (const text of NOT_OBJECTS) {
      const res = await post(path, user.headers, text);
      const what = `${path} ${text}`;
      t.is(res.status, 400, what);
      t.like(res.body.error, { type: 'invalid_request_error', param: 'body' }, what);
      t.regex(res.body.error.message, /^Invalid type for the request body: .*expected object/, what);
      t.is(typeof res.body.error.request_id, 'string', what);
    }
  }
});

test('an empty body and an object still name the field', async (t) => {
  const user = await p.newUser();
  const empty = await fetch(`${p.url}/v1/media/presigned-url`, { method: 'POST', headers: user.headers });
  t.like(((await empty.json()) as any).error, { param: 'mime_type' });
  t.like((await post('/v1/media/presigned-url', user.headers, '{"mime_type":"image/png"}')).body.error, { param: 'bytes' });
  t.like((await post('/v1/media/presigned-url', user.headers, '{"media_id":7}')).body.error, { param: 'media_id' });
  t.like((await post('/v1/media/upload', user.headers, '{}')).body.error, { param: 'source' });
  t.like((await post('/v1/media/resolve', user.headers, '{"payload":1,"x":2}')).body.error, { param: 'x' });
});
