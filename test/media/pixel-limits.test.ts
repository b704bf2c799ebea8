import test from 'ava';
import { MediaRejection, sanitizeImage, type SanitizeLimits } from '../../domains/media/index.js';
import { mediaConfigShape } from '../../domains/media/index.js';
import { loadConfig } from '../../services/kit/index.js';
import { solidImage } from './fixtures.js';

// The pixel limit is checked from the header, before any decode; GIF and WebP, whose re-encoding
// costs the most per pixel, get half of it. Small limits keep the images (and the test) small.
const limits: SanitizeLimits = { maxBytes: 5_000_000, maxPixels: 40_000, allowedTypes: ['image/jpeg', 'image/png', 'image/webp', 'image/gif'], jpegQuality: 90 };

test('JPEG and PNG may use the whole pixel limit; GIF and WebP half of it', async (t) => {
  for (const format of ['jpeg', 'png'] as const) {
    const at = await sanitizeImage(await solidImage(format, 200, 200), limits);
    t.like(at, { width: 200, height: 200 }, `${format} at the limit`);
    const over = await t.throwsAsync(sanitizeImage(await solidImage(format, 201, 200), limits), { instanceOf: MediaRejection });
    t.regex(over!.message, /too many pixels \(201 × 200\); the limit is 40000$/);
  }
  for (const format of ['gif', 'webp'] as const) {
    t.like(await sanitizeImage(await solidImage(format, 100, 200), limits), { width: 100, height: 200 }, `${format} at half the limit`);
    const over = await t.throwsAsync(sanitizeImage(await solidImage(format, 101, 200), limits), { instanceOf: MediaRejection });
    t.regex(over!.message, new RegExp(`too many pixels \\(101 × 200\\); the limit is 20000 for image/${format}$`));
  }
});

test('the default pixel limit is 50 megapixels: a 48 MP photo fits', (t) => {
  t.is(loadConfig(mediaConfigShape, {}).MEDIA_MAX_PIXELS, 50_000_000);
});
