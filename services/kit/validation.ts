import { z } from 'zod';
import { ApiError } from './errors.js';

/**
 * Request schemas are zod schemas; a violation becomes a 400 in shape A whose `param` names the
 * offending field in the form clients know from OpenAI (`messages[0].role`).
 */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown, root?: string): z.infer<S> {
  const result = schema.safeParse(input ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = formatPath(root ? [root, ...issue.path] : issue.path);
  throw new ApiError(400, describe(issue, param), { param: param || null });
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out;
}

function describe(issue: z.core.$ZodIssue, param: string): string {
  const where = param ? `'${param}'` : 'the request body';
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined ? `Missing required parameter: ${where}.` : `Invalid type for ${where}: ${issue.message}.`;
    case 'unrecognized_keys':
      return `Unrecognized parameter(s) in ${where}: ${issue.keys.join(', ')}.`;
    default:
      return `Invalid value for ${where}: ${issue.message}.`;
  }
}

/** Query-string helpers: Express gives strings or arrays; these coerce with clear errors. */
export const queryInt = (min: number, max: number) =>
  z.preprocess((v) => (v === undefined || v === '' ? undefined : Number(v)), z.number().int().min(min).max(max).optional());
