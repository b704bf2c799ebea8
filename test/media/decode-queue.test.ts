import test from 'ava';
import { ApiError } from '../../services/kit/index.js';
import { createDecodeSlots, sanitize } from '../../domains/media/index.js';
import { solidImage } from './fixtures.js';

// Each upload waiting for a decode slot holds its bytes: a request waits behind at most
// MEDIA_PROCESSING_QUEUE others, then is a 503 to retry; the worker's completions wait their turn.
const limits = { maxBytes: 10 * 1024 * 1024, maxPixels: 10_000_000, allowedTypes: ['image/png', 'image/jpeg', 'image/webp', 'image/gif'], jpegQuality: 90 };

test('past MEDIA_PROCESSING_QUEUE waiting uploads a request is a 503 with Retry-After; the worker still waits; the waiting ones finish', async (t) => {
  const withSlot = createDecodeSlots(1);
  const deps = { limits, withSlot, maxDecodeWaiting: 1 };
  const png = await solidImage('png');

  let release!: () => void;
  const holding = withSlot(() => new Promise<void>((resolve) => (release = resolve)));
  const waiting = sanitize(deps, png, true); // the one place in the queue
  const worker = sanitize(deps, png); // a completion the worker finishes: not bounded

  const refused = await t.throwsAsync(sanitize(deps, png, true));
  t.true(refused instanceof ApiError);
  t.is((refused as ApiError).status, 503);
  t.is((refused as ApiError).code, 'service_unavailable');
  t.is((refused as ApiError).headers['retry-after'], '1');

  release();
  await holding;
  t.is((await waiting).mimeType, 'image/png');
  t.is((await worker).mimeType, 'image/png');
  // The queue drained: a request is decoded again.
  t.is((await sanitize(deps, png, true)).mimeType, 'image/png');
});

test('MEDIA_PROCESSING_QUEUE 0: a request never waits, it is decoded when a slot is free and refused when none is', async (t) => {
  const withSlot = createDecodeSlots(1);
  const deps = { limits, withSlot, maxDecodeWaiting: 0 };
  const png = await solidImage('png');
  t.is((await sanitize(deps, png, true)).width, 32);
  let release!: () => void;
  const holding = withSlot(() => new Promise<void>((resolve) => (release = resolve)));
  await t.throwsAsync(sanitize(deps, png, true), { instanceOf: ApiError, message: /retry in a moment/ });
  release();
  await holding;
});
