import { z } from 'zod';
import { characterCount, isId } from '../../kit/core/index.js';
import { cursorQuery, intParam, maxCharacters } from '../../kit/http/index.js';

/**
 * Request schemas of conversations, items and branches (SPEC.md 2.2, 4.3, 8). Bodies are strict, as
 * on every other resource: a field the API does not know is a 400 naming it. Every body field the
 * openai SDK sends is known (`items` and `metadata` on create, `metadata` on update, `items` on
 * items.create, whose `include` travels in the query); the items themselves are checked by
 * `item-schema.ts`.
 */
export const METADATA_MAX_PAIRS = 16;
export const METADATA_KEY_MAX = 64;
export const METADATA_VALUE_MAX = 512;
export const ITEMS_PER_REQUEST_MAX = 20;
/**
 * The most items of one Responses turn (its input, tool items and answer), which response-api
 * appends in one request on the internal route so the turn is written whole or not at all. A
 * response's input holds at most 1000 items; the rest leaves a turn of eight steps room for more
 * than a hundred tool calls each.
 */
export const TURN_ITEMS_MAX = 2000;
/** The internal turn route's body limit: a turn carries every tool output of its steps. */
export const TURN_BODY_LIMIT = 32 * 1024 * 1024;
export const TITLE_MAX = 256;
export const REFERRER_MAX = 256;

/** Metadata: at most 16 string pairs, keys ≤ 64, values ≤ 512 characters; each breach names its param. */
export const metadataSchema = z
  .record(z.string(), z.unknown())
  .superRefine((record, ctx) => {
    const keys = Object.keys(record);
    if (keys.length > METADATA_MAX_PAIRS) ctx.addIssue({ code: 'custom', message: `at most ${METADATA_MAX_PAIRS} pairs are allowed (got ${keys.length})` });
    for (const key of keys) {
      const value = record[key];
      if (characterCount(key) > METADATA_KEY_MAX) ctx.addIssue({ code: 'custom', message: `keys must be at most ${METADATA_KEY_MAX} characters`, path: [key] });
      else if (typeof value !== 'string') ctx.addIssue({ code: 'custom', message: 'values must be strings', path: [key] });
      else if (characterCount(value) > METADATA_VALUE_MAX) ctx.addIssue({ code: 'custom', message: `values must be at most ${METADATA_VALUE_MAX} characters`, path: [key] });
    }
  })
  .transform((record) => record as Record<string, string>);

const items = z
  .array(z.unknown())
  .max(ITEMS_PER_REQUEST_MAX, `at most ${ITEMS_PER_REQUEST_MAX} items are allowed per request`);
const title = maxCharacters(TITLE_MAX);
const referrer = maxCharacters(REFERRER_MAX);
const projectId = z.string().min(1).max(64);

export const createConversationSchema = z.strictObject({
  items: items.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
  project_id: projectId.nullable().optional(),
  referrer: referrer.nullable().optional(),
  title: title.nullable().optional(),
});

/** POST /v1/conversations/{id} (the SDK's update) and PATCH: metadata (null clears), title, project_id (null unlinks). */
export const updateConversationSchema = z.strictObject({
  metadata: metadataSchema.nullable().optional(),
  title: title.nullable().optional(),
  project_id: projectId.nullable().optional(),
});

export const listConversationsQuery = z.object({ project_id: projectId.optional(), referrer: referrer.optional() });

/** A list of items to append: 1..`max` of them, each checked later by `item-schema.ts`. */
const itemsToAppend = (max: number) =>
  z
    .array(z.unknown(), { error: (issue) => (issue.input === undefined ? undefined : 'must be an array of items') })
    .min(1, 'at least one item is required')
    .max(max, `at most ${max} items are allowed per request`);

export const createItemsSchema = z.strictObject({ items: itemsToAppend(ITEMS_PER_REQUEST_MAX) });

const tokenCount = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/**
 * The internal turn append (response-api, service to service): the same items as `createItemsSchema`
 * up to `TURN_ITEMS_MAX`, for the user named in the body (internal routes carry no edge identity),
 * with the model that answered and the turn's token usage, which its `message.sent` events carry
 * as a chat turn stored with `store: true` does (`appendItems`' `model`, `tokensUsed` and
 * `answerFrom`: `answer_from` is the index of the first output item, the number of input items).
 */
export const appendTurnSchema = z
  .strictObject({
    user_id: z.string().refine((value) => isId('user', value), 'must be a user id'),
    items: itemsToAppend(TURN_ITEMS_MAX),
    model: z.string().min(1).max(300).nullable().optional(),
    tokens_used: z.strictObject({ prompt: tokenCount, completion: tokenCount }).nullable().optional(),
    answer_from: z.number().int().min(0).max(TURN_ITEMS_MAX).optional(),
  })
  .superRefine((body, ctx) => {
    if (body.answer_from !== undefined && Array.isArray(body.items) && body.answer_from > body.items.length) {
      ctx.addIssue({ code: 'custom', path: ['answer_from'], message: `must be at most the number of items (${body.items.length})` });
    }
  });

/** The internal turn append's answer: what was written, without echoing the turn back. */
export const turnAppendedSchema = z.object({
  object: z.literal('conversation.items.appended'),
  count: z.number().int(),
  first_id: z.string(),
  last_id: z.string(),
});

/** A cursor list (`limit`/`order`/`after`) that also takes `offset`: items skipped (after `after`, when both are given). */
export const listItemsQuery = cursorQuery().extend({
  offset: intParam(0, 1_000_000_000, 0),
  branch: z.string().min(1).max(64).optional(),
});

export const itemQuery = z.object({ branch: z.string().min(1).max(64).optional() });

export const createBranchSchema = z.strictObject({
  name: z.string().min(1).max(64),
  description: z.string().max(1024).nullable().optional(),
  parent_branch: z.string().min(1).max(64).nullable().optional(),
  fork_from_item_id: z.string().min(1).max(64).nullable().optional(),
});

export const editItemSchema = z.strictObject({ content: z.unknown() });

export type CreateConversationInput = z.infer<typeof createConversationSchema>;
export type UpdateConversationInput = z.infer<typeof updateConversationSchema>;
export type CreateBranchInput = z.infer<typeof createBranchSchema>;
