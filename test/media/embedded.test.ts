import test from 'ava';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, newId } from '../../services/kit/index.js';
import { startEmbeddedPlatform, type EmbeddedPlatform } from '../helpers/embedded.js';
import { waitFor } from '../helpers/wait.js';
import { solidImage } from './fixtures.js';

// The Media API on the embedded defaults of `npm start`: PGlite (one connection, so no query may
// run outside an open transaction), the PostgreSQL-backed queue, files under DATA_DIR/media.
let e: EmbeddedPlatform;
test.before(async () => {
  e = await startEmbeddedPlatform({ MEDIA_GC_GRACE_SECONDS: '0' });
});
test.after.always(async () => {
  await e?.stop();
});

test('upload, dedup, direct upload + complete, delete; the worker collects the deleted object over the embedded bus', async (t) => {
  const knex = e.platform.ctx.runtime.db.knex;
  const userId = newId('user');
  await knex('users').insert({ id: userId, subject: userId, email: 'm@example.test', username: 'm' });
  const base = `http://127.0.0.1:${e.platform.port('media-api')}`;
  const headers = { [GATEWAY_TOKEN_HEADER]: 'e'.repeat(40), [IDENTITY_HEADERS.authMethod]: 'jwt', [IDENTITY_HEADERS.userId]: userId, 'content-type': 'application/json' };
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };
  const png = await solidImage('png', 12, 12, 81);
  const first = await call('POST', '/v1/media/upload', { source: { type: 'base64', data: png.toString('base64') } });
  t.is(first.status, 201, JSON.stringify(first.body));
  const again = await call('POST', '/v1/media/upload', { source: { type: 'base64', data: png.toString('base64') } });
  t.like(again, { status: 200, body: { id: first.body.id, deduped: true } });

  const jpeg = await solidImage('jpeg', 10, 10, 82);
  const reserve = await call('POST', '/v1/media/presigned-url', { mime_type: 'image/jpeg', bytes: jpeg.length });
  // The signed URL's origin is MEDIA_PUBLIC_URL (the edge); its path works on media-api too.
  const uploadPath = new URL(reserve.body.upload_url);
  const put = await fetch(`${base}${uploadPath.pathname}${uploadPath.search}`, { method: 'PUT', headers: { [GATEWAY_TOKEN_HEADER]: 'e'.repeat(40), 'content-type': 'image/jpeg' }, body: jpeg });
  t.is(put.status, 200);
  const done = await call('POST', `/v1/media/${reserve.body.id}/complete`);
  t.like(done, { status: 201, body: { id: reserve.body.id, width: 10 } });

  t.is((await call('DELETE', `/v1/media/${first.body.id}`)).status, 200);
  await waitFor(async () => !(await knex('media_objects').where({ sha256: first.body.sha256 }).first()), 20_000, 'the deleted object collected');
  t.truthy(await knex('media_objects').where({ sha256: done.body.sha256 }).first(), 'the other object stays');
  t.is((await call('GET', '/v1/media')).body.total_count, 1);
});
