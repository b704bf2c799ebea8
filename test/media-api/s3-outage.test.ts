import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';
import { startS3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { s3rverSettings, startS3rver, type S3Server } from '../helpers/s3rver.js';

// A real S3-protocol server (s3rver) behind a proxy the test can switch to "failing": every call
// then gets the answer an overloaded or broken S3 gives (503 SlowDown, 500 InternalError). Such an
// answer, still failing after the SDK's retries, was answered as a 500 `server_error`; it is an
// outage of a dependency, so the answer is 503 `service_unavailable`, nothing is recorded, and the
// same calls work again once the store recovers.
const BUCKET = 'media-outage';
let s3: S3Server;
let proxy: Awaited<ReturnType<typeof startS3FaultProxy>>;
let failing: 0 | 500 | 503 = 0;
let failedCalls = 0;
let p: MediaPlatform;

test.before(async () => {
  s3 = await startS3rver(BUCKET);
  proxy = await startS3FaultProxy(s3.port, () => {
    if (!failing) return null;
    failedCalls++;
    return { status: failing, code: failing === 503 ? 'SlowDown' : 'InternalError', message: 'try again' };
  });
  p = await startMediaPlatform(s3rverSettings(proxy.endpoint, BUCKET));
});
test.after.always(async () => {
  await p?.stop();
  await proxy?.close();
  await s3?.close();
});

function expectOutage(t: any, res: { status: number; body: any }, what: string) {
  t.is(res.status, 503, `${what}: ${JSON.stringify(res.body)}`);
  t.like(res.body, { error: { type: 'internal_error', code: 'service_unavailable' } }, what);
  t.truthy(res.body.error?.request_id, what);
}

const mediaRows = async (userId: string) => p.runtime.db.knex('media').where({ user_id: userId }).select('id', 'state');

test('S3 answering 503 or 500: uploads, downloads and completes answer 503, record nothing, and work again after', async (t) => {
  const user = await p.newUser();
  const first = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 6, 6, 101)).toString('base64') } });
  t.is(first.status, 201, JSON.stringify(first.body));
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: 100 });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));

  const second = await solidImage('png', 7, 7, 102);
  for (const status of [503, 500] as const) {
    failing = status;
    const before = failedCalls;
    const upload = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: second.toString('base64') } });
    expectOutage(t, upload, `upload while S3 answers ${status}`);
    t.true(failedCalls > before, 'the upload did reach the failing store');
    const content = await fetch(`${p.url}/v1/media/${first.body.id}/content`, { headers: user.headers });
    expectOutage(t, { status: content.status, body: await content.json() }, `content while S3 answers ${status}`);
    // Presigning is local: a download URL is still handed out.
    t.is((await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: first.body.id })).status, 200);
  }
  const complete = await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {});
  expectOutage(t, complete, 'complete while S3 answers 500');

  // Nothing was recorded for the failed upload: the user still has exactly the first media ready.
  const rows = await mediaRows(user.userId);
  t.deepEqual(rows.filter((r: any) => r.state === 'ready').map((r: any) => r.id), [first.body.id]);

  failing = 0;
  const retried = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: second.toString('base64') } });
  t.is(retried.status, 201, JSON.stringify(retried.body));
  t.false(retried.body.deduped);
  const content = await fetch(`${p.url}/v1/media/${first.body.id}/content`, { headers: user.headers });
  t.is(content.status, 200);
  t.is(Buffer.from(await content.arrayBuffer()).length, first.body.bytes);
});
