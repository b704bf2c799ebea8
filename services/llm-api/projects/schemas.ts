import { z } from 'zod';
import { maxCharacters, pageQuery } from '../../kit/index.js';

/**
 * Request schemas of the projects resource (SPEC.md 2.1, 4.4). Bodies are strict, as on every other
 * resource: a field the API does not know (`archived` for `is_archived`) is a 400 naming it, not a
 * 200 that changed nothing.
 */
export const PROJECT_NAME_MAX = 120;
export const PROJECT_INSTRUCTION_MAX = 32768;

// Limits count characters (code points), not UTF-16 units: an emoji is one.
const name = maxCharacters(PROJECT_NAME_MAX, z.string().trim().min(1, 'must not be empty'));
const instruction = maxCharacters(PROJECT_INSTRUCTION_MAX);

export const createProjectSchema = z.strictObject({
  name,
  instruction: instruction.nullable().optional(),
});

export const updateProjectSchema = z.strictObject({
  name: name.optional(),
  instruction: instruction.nullable().optional(),
  is_archived: z.boolean().optional(),
  is_favorite: z.boolean().optional(),
});

const boolQuery = z.enum(['true', 'false']).transform((v) => v === 'true').optional();
export const listProjectsQuery = pageQuery().extend({ is_archived: boolQuery, is_favorite: boolQuery });

/** What the API answers (documentation: the OpenAPI document is generated from these). */
export const projectObjectSchema = z.object({
  id: z.string(),
  object: z.literal('project'),
  name: z.string(),
  instruction: z.string().nullable(),
  is_archived: z.boolean(),
  is_favorite: z.boolean(),
  archived_at: z.number().int().nullable(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
});
export const projectDeletedSchema = z.object({ id: z.string(), object: z.literal('project.deleted'), deleted: z.literal(true) });

export type CreateProjectInput = z.infer<typeof createProjectSchema>;
export type UpdateProjectInput = z.infer<typeof updateProjectSchema>;
