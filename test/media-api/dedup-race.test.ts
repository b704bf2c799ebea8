import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// Identical bytes uploaded by one user several times at once (JSON and multipart mixed): exactly
// one upload creates the media (201), every other one answers that same media with deduped: true
// (200), and one record exists. Another user uploading the same bytes at the same moment gets a
// media of their own.
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

function multipart(headers: Record<string, string>, bytes: Buffer) {
  const form = new FormData();
  form.append('file', new Blob([bytes]), 'same.png');
  return fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers, body: form }).then(async (res) => ({ status: res.status, body: (await res.json()) as any }));
}

test('concurrent uploads of the same bytes: one record per user, one 201 per user, the rest deduplicated', async (t) => {
  const alice = await p.newUser();
  const bob = await p.newUser();
  const png = await solidImage('png', 40, 40, 170);
  const json = (user: { headers: Record<string, string> }) => postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
  const results = await Promise.all([json(alice), multipart(alice.headers, png), json(alice), multipart(alice.headers, png), json(bob), multipart(bob.headers, png)]);
  for (const res of results) t.true(res.status === 200 || res.status === 201, JSON.stringify(res.body));

  for (const [user, answers] of [
    [alice, results.slice(0, 4)],
    [bob, results.slice(4)],
  ] as const) {
    t.is(answers.filter((r) => r.status === 201).length, 1, 'exactly one upload created the media');
    t.is(new Set(answers.map((r) => r.body.id)).size, 1, 'every answer names the same media');
    for (const r of answers) t.is(r.body.deduped, r.status === 200);
    const rows = await p.runtime.db.knex('media').where({ user_id: user.userId });
    t.is(rows.length, 1, 'one record');
    t.is(rows[0].id, answers[0]!.body.id);
  }
  t.not(results[0]!.body.id, results[4]!.body.id, 'each user has a media of their own');
  t.is(results[0]!.body.sha256, results[4]!.body.sha256);
});
