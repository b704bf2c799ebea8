import test from 'ava';
import type { MediaDeps } from '../../services/media-api/media/media.js';
import { resolveReferences } from '../../services/media-api/media/resolve.js';

// resolveReferences copies the payload while it replaces references. A key named `__proto__` (an
// ordinary own key of parsed JSON) was assigned on the copy, which set the copy's prototype
// instead: the key, and whatever it held, vanished from the result. (The HTTP route refuses such a
// key before it gets here, as every JSON body of the platform does; the function is called with
// payloads parsed elsewhere too, so it keeps whatever own keys it is given.)
const ID = `jan_${'0'.repeat(25)}1`;

const deps = {
  urlTtlSeconds: 60,
  store: {
    readyManyOf: async (_userId: string, ids: string[]) => ids.map((id) => ({ id, sha256: 'a'.repeat(64), mime_type: 'image/png', filename: null })),
  },
  storage: { downloadUrl: async () => ({ url: 'https://media.example/v1/media/signed/x' }) },
} as unknown as MediaDeps;

test('a __proto__ key of the payload survives resolution, at the top, nested, and inside image_url', async (t) => {
  // Parsed from text: each `__proto__` is an own key here.
  const payload = JSON.parse(
    `{"__proto__":{"kept":"yes","ref":"data:image/png;${ID}"},"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"${ID}","__proto__":"inner"}}]}]}`,
  );
  const { payload: out } = (await resolveReferences(deps, 'usr_x', payload)) as { payload: any };
  t.true(Object.hasOwn(out, '__proto__'), JSON.stringify(out));
  t.is(Object.getPrototypeOf(out), Object.prototype, "the copy's prototype is left alone");
  const top = Object.getOwnPropertyDescriptor(out, '__proto__')!.value;
  t.deepEqual(top, { kept: 'yes', ref: 'https://media.example/v1/media/signed/x' }, 'a reference under the key is resolved too');
  const imageUrl = out.messages[0].content[0].image_url;
  t.is(imageUrl.url, 'https://media.example/v1/media/signed/x');
  t.true(Object.hasOwn(imageUrl, '__proto__'));
  t.is(Object.getOwnPropertyDescriptor(imageUrl, '__proto__')!.value, 'inner');
  // The result serialises with the key, as the input did.
  t.regex(JSON.stringify(out), /^\{"__proto__":\{"kept":"yes"/);
});
