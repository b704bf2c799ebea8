import { createHash } from 'node:crypto';
import sharp, { type Metadata, type OutputInfo } from 'sharp';
import { FORMAT_MIME, looksLikeImage } from './sniff.js';

/**
 * Validates and sanitises an uploaded image:
 * 1. the type comes from the decoder's reading of the header (sharp), never from the client;
 * 2. the pixel count is checked from the header, before anything is decoded (a 50,000 × 50,000
 *    PNG header is refused without allocating its bitmap);
 * 3. the image is decoded and re-encoded in its own format with the EXIF orientation applied and
 *    every metadata block dropped (EXIF incl. GPS, XMP, IPTC, ICC profiles; sharp keeps none
 *    unless asked), so the stored bytes show upright and carry no location.
 * Each refusal is a MediaRejection whose message says which rule refused it.
 */
export class MediaRejection extends Error {
  constructor(
    message: string,
    readonly reason: 'empty' | 'not_image' | 'corrupt' | 'unsupported' | 'too_large' | 'too_many_pixels',
  ) {
    super(message);
    this.name = 'MediaRejection';
  }
}

export interface SanitizeLimits {
  maxBytes: number;
  maxPixels: number;
  allowedTypes: string[];
  jpegQuality: number;
}

export interface SanitizedImage {
  data: Buffer;
  mimeType: string;
  width: number;
  height: number;
  sha256: string;
}

/**
 * The pixels (width × height × frames) an image of this type may have. GIF and WebP get half of
 * `maxPixels`: re-encoding them costs far more per pixel than JPEG or PNG, and grows faster than
 * the pixel count (measured with sharp on this platform's 2-core machine: a 50 MP JPEG 1.7 s and
 * 306 MiB, a 25 MP GIF 3.1 s and 351 MiB, a 25 MP WebP 3.4 s and 293 MiB, but a 50 MP GIF 13.2 s
 * and 689 MiB), so a small palette image cannot hold a decode slot many times longer than a photo.
 */
export function pixelLimitOf(mimeType: string, maxPixels: number): number {
  return mimeType === 'image/gif' || mimeType === 'image/webp' ? Math.floor(maxPixels / 2) : maxPixels;
}

export async function sanitizeImage(input: Buffer, limits: SanitizeLimits): Promise<SanitizedImage> {
  if (input.length === 0) throw new MediaRejection('The image is empty (0 bytes)', 'empty');
  if (input.length > limits.maxBytes) throw new MediaRejection(`The image exceeds the size limit of ${limits.maxBytes} bytes`, 'too_large');
  const claimed = looksLikeImage(input);
  let meta: Metadata;
  try {
    // Reads the header only; no pixel is decoded here.
    meta = await sharp(input, { limitInputPixels: false, animated: true }).metadata();
  } catch {
    throw claimed
      ? new MediaRejection(`The image is corrupt or truncated (it starts like ${claimed} but cannot be read)`, 'corrupt')
      : new MediaRejection('The data is not an image', 'not_image');
  }
  const mimeType = meta.format ? FORMAT_MIME[meta.format] : undefined;
  if (!mimeType || !limits.allowedTypes.includes(mimeType)) {
    throw new MediaRejection(
      `Unsupported image type ${mimeType ?? meta.format ?? 'unknown'}; allowed: ${limits.allowedTypes.join(', ')}`,
      'unsupported',
    );
  }
  const width = meta.width ?? 0;
  const height = meta.pageHeight ?? meta.height ?? 0;
  const frames = meta.pages ?? 1;
  if (!width || !height) throw new MediaRejection('The image is corrupt (it has no dimensions)', 'corrupt');
  const pixels = width * height * frames;
  const maxPixels = pixelLimitOf(mimeType, limits.maxPixels);
  if (pixels > maxPixels) {
    throw new MediaRejection(
      `The image has too many pixels (${width} × ${height}${frames > 1 ? ` × ${frames} frames` : ''}); the limit is ${maxPixels}${maxPixels < limits.maxPixels ? ` for ${mimeType}` : ''}`,
      'too_many_pixels',
    );
  }

  const animated = mimeType === 'image/gif' || (mimeType === 'image/webp' && frames > 1);
  let pipeline = sharp(input, { limitInputPixels: maxPixels, failOn: 'error', animated }).autoOrient();
  switch (mimeType) {
    case 'image/jpeg':
      pipeline = pipeline.jpeg({ quality: limits.jpegQuality });
      break;
    case 'image/png':
      pipeline = pipeline.png();
      break;
    case 'image/webp':
      pipeline = pipeline.webp({ quality: limits.jpegQuality });
      break;
    default:
      pipeline = pipeline.gif();
  }
  let output: { data: Buffer; info: OutputInfo };
  try {
    output = await pipeline.toBuffer({ resolveWithObject: true });
  } catch {
    throw new MediaRejection(`The image is corrupt or truncated (${mimeType} could not be decoded)`, 'corrupt');
  }
  if (output.data.length > limits.maxBytes) {
    throw new MediaRejection(`The image exceeds the size limit of ${limits.maxBytes} bytes once sanitised`, 'too_large');
  }
  return {
    data: output.data,
    mimeType,
    width: output.info.width,
    height: output.info.pageHeight ?? output.info.height,
    sha256: createHash('sha256').update(output.data).digest('hex'),
  };
}

/** An upload that found every decode slot taken and `maxWaiting` uploads already waiting for one. */
export class DecodeQueueFull extends Error {
  constructor() {
    super('every image decode slot is taken and the wait for one is full');
    this.name = 'DecodeQueueFull';
  }
}

/**
 * Runs at most `limit` decodes at once (each holds a full bitmap); the rest wait their turn. A
 * caller passing `maxWaiting` does not wait behind that many others (DecodeQueueFull): each waiting
 * upload holds its bytes, so an unbounded wait would let a burst of uploads exhaust the memory.
 */
export function createDecodeSlots(limit: number) {
  let active = 0;
  const waiting: Array<() => void> = [];
  return async function withSlot<T>(work: () => Promise<T>, maxWaiting = Infinity): Promise<T> {
    if (active >= limit) {
      if (waiting.length >= maxWaiting) throw new DecodeQueueFull();
      await new Promise<void>((resolve) => waiting.push(resolve));
    }
    active++;
    try {
      return await work();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
}
