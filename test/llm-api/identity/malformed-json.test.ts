import test from 'ava';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { assertError, call } from './helpers.js';

// A body that is not JSON: the answer names the problem and where it is, and never repeats the
// sender's text (a password typed into a broken body would come back, and into any log of it).
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService);
});
test.after.always(() => svc?.close());

test('a malformed body is a 400 naming the position, without quoting the body', async (t) => {
  const rawBody = '{"email":"someone@example.com","password":hunter2-secret-value}';
  const r = await call(svc, 'POST', '/llm/auth/login', { rawBody });
  assertError(t, r, 400, 'body');
  const message: string = r.body.error.message;
  t.regex(message, /^Malformed JSON in request body: Unexpected token in JSON at position 42$/);
  for (const part of ['hunter2', 'someone@example.com', 'password', '"email"']) t.false(message.includes(part), message);
});

test('a body that ends early or has a stray character names the position too', async (t) => {
  const early = await call(svc, 'POST', '/llm/auth/login', { rawBody: '{"email":"a@example.com","password":"secret-value"' });
  assertError(t, early, 400, 'body');
  t.false(early.body.error.message.includes('secret-value'), early.body.error.message);
  t.regex(early.body.error.message, /position \d+/);
  const cut = await call(svc, 'POST', '/llm/auth/login', { rawBody: '{"password":' });
  assertError(t, cut, 400, 'body');
  t.is(cut.body.error.message, 'Malformed JSON in request body: Unexpected end of JSON input at position 12');
  const list = await call(svc, 'POST', '/llm/auth/login', { rawBody: '[1,]' });
  assertError(t, list, 400, 'body');
  t.is(list.body.error.message, 'Malformed JSON in request body: Unexpected token in JSON at position 3');
});
