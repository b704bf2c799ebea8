import zlib from 'node:zlib';
import sharp from 'sharp';

/** Images built in memory for the media tests (no binary fixtures in the repository). */

/**
 * A solid-colour image of the given format; each `seed` from 0 to 255 gives its own colour (different
 * bytes). The colour repeats every 256 seeds, so a seed outside that range is refused: two tests with
 * seeds 256 apart would share one stored object without knowing it.
 */
export async function solidImage(format: 'png' | 'jpeg' | 'webp' | 'gif', width = 32, height = 24, seed = 0): Promise<Buffer> {
  if (!Number.isInteger(seed) || seed < 0 || seed > 255) throw new RangeError(`solidImage: seed ${seed} is outside 0–255`);
  const background = { r: (seed * 37) % 256, g: (seed * 91 + 40) % 256, b: (seed * 53 + 80) % 256 };
  const base = sharp({ create: { width, height, channels: 3, background } });
  return base.toFormat(format).toBuffer();
}

/**
 * A 40 × 20 JPEG, left half red and right half blue, whose EXIF says orientation 6 (display rotated
 * 90° clockwise) and carries a GPS position and a camera make. Shown upright it is 20 × 40 with
 * red on top.
 */
export async function phonePhoto(): Promise<Buffer> {
  const half = (r: number, b: number) => sharp({ create: { width: 20, height: 20, channels: 3, background: { r, g: 0, b } } }).png().toBuffer();
  const raw = await sharp({ create: { width: 40, height: 20, channels: 3, background: { r: 0, g: 0, b: 0 } } })
    .composite([
      { input: await half(255, 0), left: 0, top: 0 },
      { input: await half(0, 255), left: 20, top: 0 },
    ])
    .png()
    .toBuffer();
  return sharp(raw)
    .jpeg({ quality: 95 })
    .withMetadata({ orientation: 6 })
    .withExifMerge({ IFD0: { Make: 'PhoneMaker' }, IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 24/1', GPSLongitudeRef: 'E', GPSLongitude: '2/1 21/1 3/1' } })
    .toBuffer();
}

/** True when an EXIF block holds a GPS IFD pointer (tag 0x8825, either byte order). */
export function hasGpsPointer(exif: Buffer | undefined): boolean {
  if (!exif) return false;
  return exif.includes(Buffer.from([0x25, 0x88])) || exif.includes(Buffer.from([0x88, 0x25]));
}

function pngChunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(body));
  return Buffer.concat([length, body, crc]);
}

/** A tiny PNG whose header claims 50,000 × 50,000 pixels (a decompression bomb's header). */
export function pngBombHeader(width = 50_000, height = 50_000): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', zlib.deflateSync(Buffer.alloc(1024))),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** A PNG of random pixels (incompressible: its size is about width × height × 3 bytes). */
export async function noisePng(width: number, height: number): Promise<Buffer> {
  const { randomBytes } = await import('node:crypto');
  return sharp(randomBytes(width * height * 3), { raw: { width, height, channels: 3 } }).png({ compressionLevel: 0 }).toBuffer();
}
