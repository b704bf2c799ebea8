import test from 'ava';
import { ApiError, characterCount, decodeUtf8, decodeValidUtf8, ID_PREFIXES, isId, listEnvelope, maxCharacters, newId, parseInput, parsePage, randomBase62, requestMetadataSchema, safeEqual, secretMatcher, sha256Hex, startsWithAny } from '../../services/kit/index.js';

test('ids carry their prefix, are URL-safe and do not repeat', (t) => {
  const seen = new Set<string>();
  for (const kind of Object.keys(ID_PREFIXES) as (keyof typeof ID_PREFIXES)[]) {
    for (let i = 0; i < 500; i++) {
      const id = newId(kind);
      t.true(id.startsWith(`${ID_PREFIXES[kind]}_`));
      t.is(encodeURIComponent(id), id);
      t.true(isId(kind, id));
      t.false(seen.has(id));
      seen.add(id);
    }
  }
  t.false(isId('conversation', 'msg_123'));
  t.false(isId('conversation', 'conv_short'));
});

test('random base62 has the requested length, alphabet and no obvious bias', (t) => {
  const sample = randomBase62(62 * 400);
  t.is(sample.length, 62 * 400);
  t.regex(sample, /^[0-9A-Za-z]+$/);
  const counts = new Map<string, number>();
  for (const c of sample) counts.set(c, (counts.get(c) ?? 0) + 1);
  t.is(counts.size, 62);
  for (const n of counts.values()) t.true(n > 250 && n < 560, `count ${n}`);
});

test('secretMatcher (the expected secret hashed once) answers as safeEqual does', (t) => {
  const matches = secretMatcher('sk_abc');
  for (const presented of ['sk_abc', 'sk_abd', 'sk_abcd', 'sk_ab', '', 'SK_ABC', 'sk_abc\u0000']) {
    t.is(matches(presented), safeEqual(presented, 'sk_abc'), presented);
  }
  t.true(matches('sk_abc'));
  t.false(secretMatcher('')('x'));
  t.true(secretMatcher('')(''));
});

test('safeEqual compares secrets of any length', (t) => {
  t.true(safeEqual('sk_abc', 'sk_abc'));
  t.false(safeEqual('sk_abc', 'sk_abd'));
  t.false(safeEqual('sk_abc', 'sk_abcd'));
  t.false(safeEqual('', 'x'));
  t.is(sha256Hex('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
});

test('pagination: defaults, bounds and the list envelope', (t) => {
  t.deepEqual(parsePage({}), { limit: 20, offset: 0 });
  t.deepEqual(parsePage({ limit: '5', offset: '10' }), { limit: 5, offset: 10 });
  for (const [query, param] of [
    [{ limit: '0' }, 'limit'],
    [{ limit: '101' }, 'limit'],
    [{ limit: 'ten' }, 'limit'],
    [{ limit: '2.5' }, 'limit'],
    [{ offset: '-1' }, 'offset'],
    [{ limit: ['1', '2'] }, 'limit'],
  ] as const) {
    const error = t.throws(() => parsePage(query), { instanceOf: ApiError });
    t.is(error!.status, 400);
    t.is(error!.param, param);
  }
  t.deepEqual(parsePage({ limit: '200' }, { maxLimit: 500 }), { limit: 200, offset: 0 });
  t.deepEqual(listEnvelope([1, 2], 5, { limit: 2, offset: 0 }), { object: 'list', data: [1, 2], has_more: true, total_count: 5 });
  t.deepEqual(listEnvelope([5], 5, { limit: 2, offset: 4 }), { object: 'list', data: [5], has_more: false, total_count: 5 });
  t.deepEqual(listEnvelope([], 0, { limit: 2, offset: 0 }), { object: 'list', data: [], has_more: false, total_count: 0 });
});

test('startsWithAny: any prefix of the list, none of an empty list', (t) => {
  t.true(startsWithAny('x-user-id', ['x-gateway-', 'x-user-']));
  t.false(startsWithAny('x-api-key', ['x-gateway-', 'x-user-']));
  t.false(startsWithAny('x-user-id', []));
  t.true(startsWithAny('/v1/chat', ['/v1/chat', '/v1']));
});

test('decodeUtf8 reads bytes as toString does, for large and small, valid and invalid text', (t) => {
  const samples = [
    Buffer.from('plain ascii '.repeat(1000)),
    Buffer.from('Ça marche — «ok» ✓ 😀 '.repeat(600)),
    Buffer.from('\ufeff{"bom":"é"}' + 'x'.repeat(9000)),
    Buffer.concat([Buffer.from('é'.repeat(5000)), Buffer.from([0xc3, 0x28, 0xed, 0xa0, 0x80, 0xf0, 0x9f]), Buffer.from('ok')]),
    Buffer.from('short é'),
  ];
  for (const bytes of samples) t.is(decodeUtf8(bytes), bytes.toString('utf8'));
});

test('decodeValidUtf8 reads valid UTF-8 as toString does, and gives undefined for anything else', (t) => {
  const valid = [
    Buffer.alloc(0),
    Buffer.from('short é'),
    Buffer.from('plain ascii '.repeat(1000)),
    Buffer.from('Ça marche — «ok» ✓ 😀 '.repeat(600)),
    Buffer.from('\ufeff{"bom":"é"}' + 'x'.repeat(9000)),
  ];
  for (const bytes of valid) t.is(decodeValidUtf8(bytes), bytes.toString('utf8'));
  const invalid = [
    Buffer.from([0xff]),
    Buffer.concat([Buffer.from('short '), Buffer.from([0xc3, 0x28])]),
    Buffer.concat([Buffer.from('x'.repeat(9000)), Buffer.from([0x80])]),
    Buffer.concat([Buffer.from('é'.repeat(5000)), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('ok')]),
    Buffer.concat([Buffer.from('é'.repeat(5000)), Buffer.from([0xf0, 0x9f])]),
  ];
  for (const bytes of invalid) t.is(decodeValidUtf8(bytes), undefined);
});

test('text limits count characters (code points): an emoji is one, as OpenAI and PostgreSQL count', (t) => {
  const otter = '\u{1F9A6}';
  t.is(otter.length, 2);
  t.is(characterCount(otter.repeat(3) + 'ab'), 5);
  t.is(parseInput(maxCharacters(3), otter.repeat(3)), otter.repeat(3));
  t.is((t.throws(() => parseInput(maxCharacters(3), otter.repeat(4)), { instanceOf: ApiError }) as ApiError).message.includes('at most 3 characters'), true);
  // Chat's and the Responses API's metadata: keys up to 64 characters, values up to 512.
  t.deepEqual(parseInput(requestMetadataSchema, { [otter.repeat(64)]: otter.repeat(512) }), { [otter.repeat(64)]: otter.repeat(512) });
  t.throws(() => parseInput(requestMetadataSchema, { [otter.repeat(65)]: 'v' }, 'metadata'), { instanceOf: ApiError });
  t.throws(() => parseInput(requestMetadataSchema, { k: otter.repeat(513) }, 'metadata'), { instanceOf: ApiError });
});
