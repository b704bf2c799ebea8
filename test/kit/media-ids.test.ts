import test from 'ava';
import { containsMediaId, isMediaId, ManualClock, MEDIA_ID_PATTERN, MEDIA_ID_SOURCE, newMediaId } from '../../services/kit/core/index.js';
import * as mediaDomain from '../../domains/media/index.js';

// The media-ID format is the kit's (kit/core): media-api, llm-api and response-api all find
// references with it, and domains/media re-exports it rather than keeping a copy.

test('the pattern and the source describe one format, and new ids match it and sort by time', (t) => {
  t.is(MEDIA_ID_PATTERN.source, `^${MEDIA_ID_SOURCE}$`);
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const first = newMediaId(clock);
  clock.advance(1);
  const second = newMediaId(clock);
  t.regex(first, MEDIA_ID_PATTERN);
  t.true(isMediaId(first));
  t.true(first < second, 'a later id sorts after');
  t.false(isMediaId('jan_0123456789ABCDEFGHJKMNPQRS'), 'upper case is not the format');
  t.false(isMediaId('jan_0123456789abcdefghjkmnpqri'), 'i is not in the alphabet');
  t.false(isMediaId(42));
});

test('containsMediaId finds an id in any string of a parsed JSON value, keys included', (t) => {
  const id = newMediaId(new ManualClock(0));
  t.true(containsMediaId([{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;${id}` } }] }]));
  t.true(containsMediaId({ [id]: 1 }));
  t.true(containsMediaId(id));
  t.false(containsMediaId([{ content: 'jan_ is a prefix, not an id', n: 1, ok: true, none: null }]));
  t.false(containsMediaId(id.toUpperCase()));
});

test('domains/media uses the kit’s format, not a copy', (t) => {
  t.is(mediaDomain.MEDIA_ID_PATTERN, MEDIA_ID_PATTERN);
  t.is(mediaDomain.MEDIA_ID_SOURCE, MEDIA_ID_SOURCE);
  t.is(mediaDomain.newMediaId, newMediaId);
  t.is(mediaDomain.isMediaId, isMediaId);
});
