import test from 'ava';
import { contentText, estimateTokens, estimateTokensOf, keepNewest, TOKENS_PER_IMAGE } from '../../services/kit/index.js';

test('the estimate: 4 characters per token of text, 4 per message, a fixed cost per image, tool calls by their JSON', (t) => {
  t.is(estimateTokens({ content: 'x'.repeat(40) }), 14);
  t.is(estimateTokens({ content: [{ type: 'text', text: 'abcd' }, { type: 'image_url', image_url: { url: 'jan_1' } }, { type: 'text', text: 'efg' }] }), 6 + TOKENS_PER_IMAGE);
  const dataUrl = `data:image/png;base64,${'A'.repeat(1_000_000)}`;
  t.is(estimateTokens({ content: [{ type: 'image_url', image_url: { url: dataUrl } }] }), TOKENS_PER_IMAGE + 4, "an image alone costs the same whatever its URL's length");
  t.is(estimateTokens({ content: [{ type: 'input_image', image_url: dataUrl }, { type: 'input_image', image_url: 'jan_2' }] }), 2 * TOKENS_PER_IMAGE + 4);
  t.is(estimateTokens({ content: [{ type: 'file', file: { file_id: 'f' } }] }), Math.ceil(JSON.stringify([{ type: 'file', file: { file_id: 'f' } }]).length / 4) + 4, 'a part with neither text nor an image costs its JSON');
  const calls = [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }];
  t.is(estimateTokens({ content: null, tool_calls: calls }), Math.ceil((2 + JSON.stringify(calls).length) / 4) + 4);
  t.is(estimateTokensOf([{ content: 'abcd' }, { content: 'x'.repeat(40) }]), 5 + 14);
});

test("a message's text: the string, or its parts' text, refusals and stored output_text joined; other parts add nothing", (t) => {
  t.is(contentText('plain'), 'plain');
  t.is(contentText(null), '');
  t.is(contentText({ text: 'not a list' }), '');
  const parts = [
    { type: 'input_text', text: 'a' },
    { type: 'image_url', image_url: { url: 'jan_1' } },
    { type: 'output_text', text: 'b' },
    { type: 'refusal', refusal: 'c' },
    { type: 'output_text', output_text: { text: 'd' } },
    null,
    'e',
    { type: 'text', text: 5 },
  ];
  t.is(contentText(parts), 'abcd');
  t.is(estimateTokens({ content: [{ type: 'refusal', refusal: 'x'.repeat(40) }] }), 14, 'a refusal costs its text');
});

test('keepNewest keeps the newest that fit, oldest first, and reads no further than the first that does not', async (t) => {
  let pulled = 0;
  async function* newestFirst() {
    for (const cost of [3, 3, 5, 1, 1]) {
      pulled++;
      yield cost;
    }
  }
  t.deepEqual(await keepNewest(newestFirst(), (c) => c, 8), [3, 3]);
  t.is(pulled, 3, 'the entry that did not fit is the last one read');
  t.deepEqual(await keepNewest([2, 2], (c) => c, 0), []);
  t.deepEqual(await keepNewest(['c', 'b', 'a'], () => 1, Number.POSITIVE_INFINITY), ['a', 'b', 'c']);
});
