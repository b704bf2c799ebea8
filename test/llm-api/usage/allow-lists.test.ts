import test from 'ava';
import { modelAllowed } from '../../../services/llm-api/usage/budgets.js';

// Model allow-lists (`allowed_models` of a key or a user, checked at every chat admission and for
// the model list): `*` is any run of characters, everything else literal. A key's owner sets the
// list, so a list of many stars must not make one check take the process for itself.

test('`*` matches any run of characters, possibly none; everything else is literal', (t) => {
  const cases: Array<[string, string, boolean]> = [
    ['gpt-4o', 'gpt-4o', true],
    ['gpt-4o', 'gpt-4o-mini', false],
    ['gpt-4o*', 'gpt-4o', true],
    ['gpt-4o*', 'gpt-4o-mini', true],
    ['gpt-4o*', 'gpt-4', false],
    ['*', '', true],
    ['*', 'anything', true],
    ['*-mini', 'gpt-4o-mini', true],
    ['*-mini', 'gpt-4o-mini-2', false],
    ['llama-*-instruct', 'llama-3.1-8b-instruct', true],
    ['llama-*-instruct', 'llama--instruct', true],
    ['llama-*-instruct', 'llama-3-chat', false],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'aXbYc', true],
    ['a*b*c', 'acb', false],
    ['**x', 'x', true],
    ['x**', 'xyz', true],
    ['a.b*', 'aXb', false], // a dot is a dot
    ['(m)+*', '(m)+1', true],
    ['(m)+*', 'mm1', false],
    ['*ab', 'aab', true],
    ['*aab', 'aaab', true],
  ];
  for (const [pattern, model, allowed] of cases) t.is(modelAllowed([pattern], model), allowed, `${pattern} ~ ${model}`);
  t.true(modelAllowed(['x', 'gpt-*'], 'gpt-5'), 'any pattern of the list');
  t.false(modelAllowed([], 'gpt-5'), 'an empty list admits nothing');
});

test('a list of many stars against a model name that almost matches is answered (no backtracking blow-up)', (t) => {
  // As a regular expression (`.*` per star) this took about 0.4 s with 12 stars and 30 characters,
  // growing as characters^stars; these sizes (within what the API accepts) never finished.
  const pattern = `${'*a'.repeat(149)}*b`;
  t.is(pattern.length, 300);
  t.false(modelAllowed([pattern], 'a'.repeat(250)));
  t.true(modelAllowed([pattern], `${'a'.repeat(250)}b`));
});
