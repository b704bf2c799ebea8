import { z } from 'zod';
import { characterCount } from '../validation.js';

/** `schema` (a string) of at most `max` characters (code points, `characterCount`), shown as `maxLength` in the OpenAPI document. */
export const maxCharacters = (max: number, schema: z.ZodString = z.string()) =>
  schema.refine((value) => characterCount(value) <= max, `must be at most ${max} characters`).meta({ maxLength: max });

/**
 * Request fields that Chat Completions and Responses accept with the same rules (OpenAI's), so the
 * two APIs validate them, and answer a violation, the same way.
 */

/** `metadata`: up to 16 string pairs, keys up to 64 characters, values up to 512 (code points: an emoji is one). */
export const requestMetadataSchema = z
  .record(maxCharacters(64), maxCharacters(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 pairs')
  .nullable()
  .optional();

/** `conversation`: a conversation id, or an object carrying it. */
export const conversationRefSchema = z.union([z.string().min(1).max(128), z.looseObject({ id: z.string().min(1).max(128) })]).nullable().optional();
