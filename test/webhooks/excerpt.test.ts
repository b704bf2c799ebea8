import test from 'ava';
import { excerptText, RESPONSE_EXCERPT_BYTES } from '../../domains/webhooks/index.js';

// The one place a receiver's answer becomes stored text: whatever the bytes, the result is text
// PostgreSQL accepts (no NUL), at most RESPONSE_EXCERPT_BYTES of the answer.
test('any bytes become storable text: NUL and control characters removed, invalid UTF-8 replaced, the limit kept', (t) => {
  t.is(excerptText(null), null);
  t.is(excerptText(Buffer.alloc(0)), null);
  t.is(excerptText(Buffer.from('{"ok":true}\n')), '{"ok":true}\n');
  t.is(excerptText(Buffer.from('a\u0000b\u0007c\td\r\n')), 'abc\td\r\n');
  t.is(excerptText(Buffer.from([0x00, 0x00])), null, 'nothing left but NUL');
  // A gzip header: controls dropped, bytes that are not UTF-8 replaced.
  t.is(excerptText(Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x41])), '\ufffdA');
  // A character cut at the limit is replaced, not stored as half a sequence.
  const cut = Buffer.concat([Buffer.alloc(RESPONSE_EXCERPT_BYTES - 1, 0x61), Buffer.from('é')]);
  t.is(excerptText(cut), `${'a'.repeat(RESPONSE_EXCERPT_BYTES - 1)}\ufffd`);
  t.is(excerptText(Buffer.alloc(4096, 0x62)), 'b'.repeat(RESPONSE_EXCERPT_BYTES));
  t.is(excerptText(Buffer.from('grüße ✓')), 'grüße ✓');
});
