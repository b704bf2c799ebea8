import { z } from 'zod';

/** Request and response schemas of the Media API (validation and the OpenAPI document). */

const filename = z.string().min(1).max(255);

export const uploadBody = z
  .object({
    source: z.discriminatedUnion('type', [
      z.object({ type: z.literal('url'), url: z.string().min(1).max(8192) }).strict(),
      z.object({ type: z.literal('base64'), data: z.string().min(1), mime_type: z.string().max(100).optional() }).strict(),
      z.object({ type: z.literal('data_url'), data_url: z.string().min(1) }).strict(),
    ]),
    filename: filename.optional(),
  })
  .strict();

export const presignDownloadBody = z
  .object({ media_id: z.string().min(1).max(100), expires_in: z.number().int().min(1).optional() })
  .strict();
export const presignUploadBody = z
  .object({ mime_type: z.string().min(1).max(100), bytes: z.number().int().min(1), filename: filename.optional() })
  .strict();

export const resolveBody = z.object({ payload: z.unknown() }).strict();

export const mediaObject = z.object({
  id: z.string(),
  object: z.literal('media'),
  mime_type: z.string(),
  bytes: z.number().int(),
  width: z.number().int(),
  height: z.number().int(),
  sha256: z.string(),
  deduped: z.boolean(),
  filename: z.string().nullable(),
  created_at: z.number().int(),
  url: z.string(),
  url_expires_at: z.number().int(),
});
export type MediaObject = z.infer<typeof mediaObject>;

export const mediaList = z.object({ object: z.literal('list'), data: z.array(mediaObject), has_more: z.boolean(), total_count: z.number().int() });
export const mediaDeleted = z.object({ id: z.string(), object: z.literal('media.deleted'), deleted: z.literal(true) });
export const downloadUrl = z.object({ id: z.string(), object: z.literal('media.url'), url: z.string(), expires_at: z.number().int() });
export const uploadReservation = z.object({
  id: z.string(),
  object: z.literal('media.upload'),
  upload_url: z.string(),
  method: z.literal('PUT'),
  headers: z.record(z.string(), z.string()),
  expires_at: z.number().int(),
});
export const resolved = z.object({ payload: z.unknown() });
