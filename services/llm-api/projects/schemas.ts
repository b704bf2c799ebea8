import { z } from 'zod';

/** Request schemas of the projects resource (SPEC.md 2.1, 4.4). */
export const PROJECT_NAME_MAX = 120;
export const PROJECT_INSTRUCTION_MAX = 32768;

const name = z
  .string()
  .trim()
  .min(1, 'must not be empty')
  .max(PROJECT_NAME_MAX, `must be at most ${PROJECT_NAME_MAX} characters`);
const instruction = z.string().max(PROJECT_INSTRUCTION_MAX, `must be at most ${PROJECT_INSTRUCTION_MAX} characters`);

export const createProjectSchema = z.object({
  name,
  instruction: instruction.nullable().optional(),
});

export const updateProjectSchema = z.object({
  name: name.optional(),
  instruction: instruction.nullable().optional(),
  is_archived: z.boolean().optional(),
  is_favorite: z.boolean().optional(),
});

const boolQuery = z.enum(['true', 'false']).transform((v) => v === 'true').optional();
export const listProjectsQuery = z.object({ is_archived: boolQuery, is_favorite: boolQuery });

export type CreateProjectInput = z.infer<typeof createProjectSchema>;
export type UpdateProjectInput = z.infer<typeof updateProjectSchema>;
