import { z } from 'zod';

/** Settings of conversations (parsed once per app with the kit's `loadConfig`). */
export const conversationsConfigShape = {
  /**
   * Soft-deleted conversations (and all their items and branches) are erased this many days after
   * deletion; 0 = never, the default: SPEC.md 3 keeps a deleted conversation's items stored
   * (inaccessible, not physically removed), so erasure is a retention policy an operator opts into.
   */
  CONVERSATION_PURGE_AFTER_DAYS: z.coerce.number().int().min(0).max(36500).default(0),
  /** How often the purge job looks for conversations to erase (at most `MAX_TIMER_MS`, as every `*_MS` setting). */
  CONVERSATION_PURGE_INTERVAL_MS: z.coerce.number().int().min(1000).default(3_600_000),
};
