import test from 'ava';
import { encodeWithRawMembers, jsonDepth, scanJsonMembers } from '../../services/kit/index.js';

const WANTED = ['messages', 'tools'] as const;
const scan = (text: string | Buffer, stopAbove = 64) => scanJsonMembers(Buffer.isBuffer(text) ? text : Buffer.from(text), stopAbove, WANTED);
const member = (text: string | Buffer, name: string) => scan(text).members?.get(name)?.toString('utf8');

test('finds the bytes of the wanted object and array members, as they were written', (t) => {
  const text = '{ "model" : "m",\n  "messages" : [ {"role":"user", "content":"a } ] { [ \\" \\\\"} ] ,"tools":{"x":[1,2]},"stream":true}';
  t.is(member(text, 'messages'), '[ {"role":"user", "content":"a } ] { [ \\" \\\\"} ]');
  t.is(member(text, 'tools'), '{"x":[1,2]}');
  t.deepEqual(JSON.parse(member(text, 'messages')!), JSON.parse(text).messages);
});

test('measures the nesting outside strings, and stops above the bound', (t) => {
  const depths: Array<[string, number]> = [['{}', 1], ['{"messages":[[[{"a":"[[[["}]]]]}', 5], ['[1,[2,[3]]]', 3], ['{"a":"\\\\","b":{"c":[]}}', 3], ['{"a":"x\\"[[","b":[1]}', 2]];
  for (const [text, depth] of depths) {
    t.is(scan(text).depth, depth, text);
    t.is(jsonDepth(text), depth, text);
  }
  const deep = `{"messages":${'['.repeat(100)}${']'.repeat(100)}}`;
  const scanned = scan(deep, 10);
  t.is(scanned.depth, 11);
  t.is(scanned.members, undefined);
});

test('names that are not wanted, and wanted members that are not objects, keep no bytes', (t) => {
  t.is(scan('{"model":"m","stream":true}').members, undefined);
  t.is(member('{"messages":"a string","tools":[1]}', 'messages'), undefined);
  t.is(member('{"messages":"a string","tools":[1]}', 'tools'), '[1]');
  // A wanted name as a value, or inside a nested object, is not a member.
  t.is(member('{"model":"messages","x":{"messages":[1]},"tools":[2]}', 'messages'), undefined);
});

test('no bytes where the parsed body could say something else', (t) => {
  // JSON.parse keeps the last of two equal names.
  t.is(scan('{"messages":[1],"messages":[2]}').members, undefined);
  t.is(scan('{"messages":[1],"messages":null}').members, undefined);
  // An escape in a name can spell a wanted one.
  t.is(scan('{"messages":[1],"messag\\u0065s":[2]}').members, undefined);
  t.is(scan('{"a\\"b":1,"messages":[1]}').members, undefined);
  // Bytes that are not UTF-8 decode to U+FFFD in the parsed strings.
  t.is(scan(Buffer.concat([Buffer.from('{"messages":["'), Buffer.from([0xff, 0xfe]), Buffer.from('"]}')])).members, undefined);
  // Not an object.
  t.is(scan('[{"messages":[1]}]').members, undefined);
});

test('non-ASCII text is kept byte for byte', (t) => {
  const text = '{"messages":[{"role":"user","content":"Ça marche — «ok» ✓ 😀"}]}';
  t.is(member(text, 'messages'), '[{"role":"user","content":"Ça marche — «ok» ✓ 😀"}]');
});

test('encodeWithRawMembers: the same JSON as JSON.stringify, with members still the request\'s sent as their bytes', (t) => {
  const text = '{"model":"alias","messages":[ {"role":"user","content":"hi \\u00e9"} ],"tools":[{"type":"function","function":{"name":"f"}}],"store":true}';
  const request = JSON.parse(text);
  const { members } = scan(text);
  const body = { ...request, model: 'upstream-id', store: undefined, max_completion_tokens: 5 };
  const encoded = encodeWithRawMembers(body, request, WANTED, members);
  t.true(Buffer.isBuffer(encoded));
  t.true(encoded.toString().includes('"messages":[ {"role":"user","content":"hi \\u00e9"} ]'), 'the bytes as they arrived');
  t.deepEqual(JSON.parse(encoded.toString()), JSON.parse(JSON.stringify(body)));
  // A member replaced by a step is serialised; the other is still forwarded.
  const stepped = { ...body, messages: [{ role: 'user', content: 'rewritten' }] };
  const mixed = JSON.parse(encodeWithRawMembers(stepped, request, WANTED, members).toString());
  t.deepEqual(mixed.messages, [{ role: 'user', content: 'rewritten' }]);
  t.deepEqual(mixed.tools, request.tools);
  // Without bytes, or with nothing to forward, it is JSON.stringify.
  t.is(encodeWithRawMembers(body, request, WANTED, undefined), JSON.stringify(body));
  const onlyMessages = { model: 'x', messages: request.messages };
  t.is(encodeWithRawMembers(onlyMessages, request, WANTED, members).toString(), '{"messages":[ {"role":"user","content":"hi \\u00e9"} ],"model":"x"}');
  t.is(encodeWithRawMembers({ messages: request.messages }, request, WANTED, members).toString(), '{"messages":[ {"role":"user","content":"hi \\u00e9"} ]}');
});
