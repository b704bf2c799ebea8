import { z } from 'zod';

/**
 * Request fields that Chat Completions and Responses accept with the same rules (OpenAI's), so the
 * two APIs validate them, and answer a violation, the same way.
 */

/** `metadata`: up to 16 string pairs, keys up to 64 characters, values up to 512. */
export const requestMetadataSchema = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 pairs')
  .nullable()
  .optional();

/** `conversation`: a conversation id, or an object carrying it. */
export const conversationRefSchema = z.union([z.string().min(1).max(128), z.looseObject({ id: z.string().min(1).max(128) })]).nullable().optional();
