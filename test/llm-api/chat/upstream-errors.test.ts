import test from 'ava';
import { leadingErrorEvent } from '../../../services/llm-api/chat/dispatch.js';
import { clientErrorFor, redactSecrets } from '../../../services/llm-api/chat/upstream-errors.js';

const fields = new Set(['messages', 'temperature', 'tools']);

test('redaction: the configured key anywhere, bearer and basic credentials, key- and JWT-shaped strings, secret-named fields', (t) => {
  const key = 'custom-provider-credential-XYZ';
  const text = JSON.stringify({
    error: `bad key ${key} (Authorization: Bearer abc.def-ghi_jkl) basic: Basic dXNlcjpwYXNz`,
    other: 'sk-proj-AbCdEf0123456789ZZZZ and sk_live_0123456789abcdefghij',
    jwt: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLXZhbHVl',
    api_key: 'plain-value-1234',
    password: 'hunter22',
  });
  const out = redactSecrets(text, [key]);
  for (const secret of [key, 'abc.def-ghi_jkl', 'dXNlcjpwYXNz', 'sk-proj-AbCdEf0123456789ZZZZ', 'sk_live_0123456789abcdefghij', 'eyJhbGciOiJIUzI1NiJ9', 'plain-value-1234', 'hunter22']) {
    t.false(out.includes(secret), secret);
  }
  t.true(out.includes('bad key'));
  t.true(redactSecrets('x'.repeat(10_000), [], 100).length <= 101);
});

test('an upstream 4xx becomes our message: known codes and request params map, free text and foreign params never', (t) => {
  const known = clientErrorFor(400, JSON.stringify({ error: { message: 'secret sk-123 leaked', code: 'unsupported_parameter', param: 'temperature' } }), fields);
  t.is(known.status, 400);
  t.is(known.code, 'unsupported_parameter');
  t.is(known.param, 'temperature');
  t.false(known.message.includes('sk-123'));
  const nested = clientErrorFor(400, JSON.stringify({ error: { message: 'x', code: 'invalid_value', param: 'messages[3].content' } }), fields);
  t.is(nested.param, 'messages[3].content');
  const foreign = clientErrorFor(422, JSON.stringify({ error: { message: 'x', code: 'made_up_code sk-abc', param: 'sk_abcdefghijklmnop' } }), fields);
  t.is(foreign.code, 'upstream_invalid_request');
  t.is(foreign.param, null);
  t.is(foreign.message, 'The model provider rejected the request (upstream status 422)');
  const worded = clientErrorFor(400, JSON.stringify({ object: 'error', message: "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens" }), fields);
  t.is(worded.code, 'context_length_exceeded');
  t.is(worded.param, 'messages');
  t.is(clientErrorFor(413, 'too big', fields).status, 413);
  t.is(clientErrorFor(400, '<html>proxy error at 10.0.0.7</html>', fields).message, 'The model provider rejected the request (upstream status 400)');
});

test("a stream's leading error event: found after comments and data-less events, with CRLF; not when other data comes first or the word is only text", (t) => {
  const error = JSON.stringify({ error: { message: 'boom', code: 'x' } });
  const chunk = (text: string) => Buffer.from(text);
  t.is(leadingErrorEvent(chunk(`data: ${error}\n\n`)), error);
  t.is(leadingErrorEvent(chunk(`: hello\r\n\r\nevent: ping\r\n\r\nevent: error\r\ndata: ${error}\r\n\r\n`)), error);
  // Not cut yet by a blank line, but whole: the provider closed after it.
  t.is(leadingErrorEvent(chunk(`data: ${error}`)), error);
  const role = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] })}\n\n`;
  t.is(leadingErrorEvent(chunk(`${role}data: ${error}\n\n`)), null, 'an error after the first data event is the relay\'s');
  t.is(leadingErrorEvent(chunk(`data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, delta: { content: '"error"' } }], error: null })}\n\n`)), null);
  t.is(leadingErrorEvent(chunk(`data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, finish_reason: 'error', delta: {} }] })}\n\n`)), null);
  t.is(leadingErrorEvent(chunk(`data: {"error": {"message": "cut in the mid`)), null);
  t.is(leadingErrorEvent(new Uint8Array(chunk(`data: ${error}\n\n`))), error, 'a Uint8Array that is not a Buffer');
});

test("a stream's leading event named error is an error whatever its data: no error key, not JSON; a name that only starts so is not", (t) => {
  const chunk = (text: string) => Buffer.from(text);
  t.is(leadingErrorEvent(chunk('event: error\ndata: {"message":"overloaded"}\n\n')), '{"message":"overloaded"}');
  t.is(leadingErrorEvent(chunk(': hi\r\n\r\nevent: error\r\ndata: overloaded\r\n\r\n')), 'overloaded');
  t.is(leadingErrorEvent(chunk('event: errors\ndata: {"message":"x"}\n\n')), null);
  t.is(leadingErrorEvent(chunk(`data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, delta: { content: 'an error of mine' } }] })}\n\n`)), null);
});
