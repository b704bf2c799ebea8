import { toChatMessages, type ChatMessage } from './items.js';
import type { EndedRow, ResponseRow } from './store.js';

/** What an mcp_call that never finished says, to the client and to the model when chained from. */
export const UNFINISHED_CALL_ERROR = 'The response ended before this call did';

/**
 * The output of a response that ended without its loop (a cancel no loop answered, the sweep, a
 * read that found it older than any loop runs), as OpenAI leaves an ended response: no item stays
 * `in_progress`. Each such item becomes `incomplete`, its content so far kept; an `mcp_call` with
 * no result yet also says it never finished, so a model given it as history reads why it has none.
 */
export function interruptedOutput(output: Array<Record<string, any>> | undefined): Array<Record<string, any>> {
  return (output ?? []).map((item) => {
    if (item.status !== 'in_progress') return item;
    const ended: Record<string, any> = { ...item, status: 'incomplete' };
    if (item.type === 'mcp_call' && (item.output === null || item.output === undefined || item.output === '') && !item.error) ended.error = UNFINISHED_CALL_ERROR;
    return ended;
  });
}

/**
 * A running response's row as it ends without its loop, `status` (and `error`) over its last
 * written body. The context kept for `previous_response_id` is the one its loop started from (a
 * running row keeps no other) followed by the output it produced so far, as a loop that stops
 * keeps it, so a chain continues from what was produced rather than from its input alone.
 */
export function endedRow(row: Pick<ResponseRow, 'body' | 'context'>, end: { status: string; error?: { code: string; message: string } }): EndedRow {
  const output = interruptedOutput(row.body.output);
  const body = { ...row.body, status: end.status, output, ...(end.error ? { error: { ...end.error } } : {}) };
  return { status: end.status, body, context: [...(row.context as ChatMessage[]), ...toChatMessages(output)] };
}
