import test from 'ava';
import { createServiceApp, listen, parseSize, route, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import { createLogger } from '../../services/kit/logger.js';
import { assertStorableRequestStrings, jsonDepth, parseJsonText } from '../../services/kit/validation.js';

/**
 * The kit's rule for hostile input, on a bare service app: strings no database can store (NUL,
 * unpaired surrogates) in the body, path or query, `__proto__` keys, numbers beyond a double and
 * JSON nested deeper than the limit are 400s naming the field, before any handler runs.
 */

const users: UserDirectory = { resolve: async (c) => ({ ...c, isAdmin: false, isGuest: false }), invalidate: () => {} };
let server: RunningServer;
let handled = 0;
const headers = { 'x-auth-method': 'jwt', 'x-user-id': 'user_x', 'content-type': 'application/json' };

test.before(async () => {
  const app = createServiceApp({
    name: 'strings-test',
    logger: createLogger({ level: 'silent', name: 't' }),
    users,
    bodyLimit: parseSize('1mb'),
    jsonMaxDepth: 8,
    routeTable: [
      route({
        method: 'post',
        path: '/echo',
        summary: 'echo',
        access: 'user',
        handler: ({ body }) => {
          handled++;
          return { body };
        },
      }),
      route({
        method: 'get',
        path: '/things/:id',
        summary: 'a thing',
        access: 'user',
        handler: ({ params, query }) => {
          handled++;
          return { id: params.id, query };
        },
      }),
    ],
  });
  server = await listen(app, { host: '127.0.0.1', port: 0 });
});
test.after.always(() => server?.close(0));

async function call(path: string, body?: string) {
  const response = await fetch(`http://127.0.0.1:${server.port}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    body,
  });
  return { status: response.status, json: (await response.json()) as { error?: { type: string; code: string; param: string | null; message: string } } };
}

const refusals: Array<[string, string, string]> = [
  ['NUL in a nested string', '{"metadata":{"title":"a\\u0000b"}}', 'metadata.title'],
  ['lone high surrogate in an array item', '{"items":[{"content":"x"},{"content":"\\ud800"}]}', 'items[1].content'],
  ['lone low surrogate', '{"name":"\\udc00abc"}', 'name'],
  ['NUL in a key', '{"metadata":{"a\\u0000":"v"}}', 'metadata.a\ufffd'],
  ['__proto__ key', '{"metadata":{"__proto__":{"isAdmin":true}}}', 'metadata.__proto__'],
  ['number beyond a double', '{"max_tokens":1e400}', 'max_tokens'],
  ['nesting deeper than the limit', '{"a":' + '['.repeat(5000) + ']'.repeat(5000) + '}', 'body'],
];

for (const [what, body, param] of refusals) {
  test.serial(`body: ${what} → 400 naming ${param}`, async (t) => {
    const before = handled;
    const { status, json } = await call('/echo', body);
    t.is(status, 400);
    t.is(json.error?.type, 'invalid_request_error');
    t.is(json.error?.param, param);
    t.is(handled, before, 'the handler never ran');
  });
}

test('body: paired surrogates (emoji), escaped brackets in strings and nesting at the limit pass', async (t) => {
  const deep = '['.repeat(7) + ']'.repeat(7);
  const body = `{"title":"\\ud83d\\ude00 [[[[[[[[[[ {{{{{{{{{ \\" ]]","n":${deep}}`;
  const { status, json } = await call('/echo', body);
  t.is(status, 200);
  t.deepEqual(json, { body: { title: '😀 [[[[[[[[[[ {{{{{{{{{ " ]]', n: JSON.parse(deep) } });
});

const pathRefusals: Array<[string, string, string]> = [
  ['NUL in a path id', '/things/conv_%00abc', 'path'],
  ['encoded lone surrogate in a path id', '/things/%ED%A0%80', 'path'],
  ['malformed percent-encoding', '/things/%E0%A4', 'path'],
  ['NUL in a query value', '/things/x?after=a%00b', 'after'],
  ['NUL in a nested query value', '/things/x?filter[name]=a%00', 'filter.name'],
];

for (const [what, path, param] of pathRefusals) {
  test.serial(`request line: ${what} → 400 naming ${param}`, async (t) => {
    const before = handled;
    const { status, json } = await call(path);
    t.is(status, 400);
    t.is(json.error?.param, param);
    t.is(handled, before);
  });
}

test('a path with no percent-encoding is checked whole, with the same verdict as segment by segment', (t) => {
  for (const path of ['/v1/chat/completions', '/things/😀', '/', '']) t.notThrows(() => assertStorableRequestStrings(path, {}), path);
  for (const path of ['/things/a\u0000b', '/things/\ud800', '/things/\udc00x', '/things/\ud800/\udc00']) {
    const error = t.throws(() => assertStorableRequestStrings(path, {}));
    t.is((error as { param?: string }).param, 'path', JSON.stringify(path));
  }
  // With percent-encoding, a segment's decoded text counts.
  t.notThrows(() => assertStorableRequestStrings('/things/%F0%9F%98%80/x', {}));
  t.throws(() => assertStorableRequestStrings('/things/ok/a%00', {}));
});

test('jsonDepth counts structure outside strings and stops early', (t) => {
  t.is(jsonDepth('{"a":[1,{"b":"[[[{{"}]}'), 3);
  t.is(jsonDepth('"\\\\" [ ]'), 1);
  t.is(jsonDepth('{"a":"x\\"[[[[","b":[1]}'), 2, 'an escaped quote does not end the string');
  t.is(jsonDepth('{"a":"x\\\\\\"[[","b":[1]}'), 2, 'three backslashes then a quote: still escaped');
  t.is(jsonDepth('{"a":"x\\\\","b":[[1]]}'), 3, 'two backslashes: the quote closes the string');
  t.is(jsonDepth('['.repeat(1_000_000), 64), 65);
  t.throws(() => parseJsonText('['.repeat(65) + ']'.repeat(65)), { message: /deeper than 64/ });
  t.deepEqual(parseJsonText('['.repeat(64) + ']'.repeat(64)), JSON.parse('['.repeat(64) + ']'.repeat(64)));
});

test('parseJsonText: bytes without a \\u escape need no check of each string; every other text gets one', (t) => {
  const param = (text: string, bytes?: Buffer) => (t.throws(() => parseJsonText(text, { bytes })) as { param?: string }).param;
  // Text handed over by code (no bytes) may hold an unpaired surrogate as itself.
  t.is(param('{"a":[1,{"b":"x\ud800"}]}'), 'a[1].b');
  t.is(param('{"a":{"k\udc00":1}}'), 'a.k\ufffd');
  // Decoded bytes cannot; with an escape every string is checked, whatever else the bytes hold.
  const escaped = '{"ok":"C:\\\\users","bad":"\\u0000"}';
  t.is(param(escaped, Buffer.from(escaped)), 'bad');
  const broken = Buffer.concat([Buffer.from('{"s":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]);
  t.deepEqual(parseJsonText(broken.toString('utf8'), { bytes: broken }), { s: '\ufffd\ufffd\ufffd' });
  // Keys and numbers are checked either way.
  for (const text of ['{"a":{"__proto__":{}}}', '{"a":[1e400]}']) t.truthy(param(text, Buffer.from(text)));
  const plain = '{"t":"Ça marche — ✓ 😀","n":[1.5,{"k":"v"}]}';
  t.deepEqual(parseJsonText(plain, { bytes: Buffer.from(plain) }), { t: 'Ça marche — ✓ 😀', n: [1.5, { k: 'v' }] });
});
