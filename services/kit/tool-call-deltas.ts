/** A tool call assembled from the deltas of a streamed chat completion (`index`: its place among the choice's calls). */
export interface StreamedToolCall {
  index: number;
  id: string;
  name: string;
  arguments: string;
}

/**
 * Adds one tool-call delta of a streamed chat completion to `calls` (created with the first call,
 * so a stream without tool calls allocates nothing) and returns the list. The first delta of a call
 * brings its id and name, the later ones pieces of its arguments, each naming the call by `index`:
 * assembled as the openai SDK does, id and name taken as given (a provider may repeat the name in
 * every delta), arguments appended. A delta without an index (some providers) starts a new call
 * when it brings an id not seen yet, and continues the last one otherwise. The list stays in the
 * order of the calls' index. The one rule for llm-api's relay and response-api's streamed steps.
 */
export function collectToolCallDelta<T extends StreamedToolCall = StreamedToolCall>(calls: T[] | null, fragment: unknown): T[] | null {
  if (!fragment || typeof fragment !== 'object') return calls;
  const { index, id: givenId, function: fn } = fragment as { index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } | null };
  const list = calls ?? [];
  const id = typeof givenId === 'string' && givenId !== '' ? givenId : undefined;
  let call: T | undefined;
  if (typeof index === 'number') call = list.find((c) => c.index === index);
  else call = id !== undefined && !list.some((c) => c.id === id) ? undefined : list.at(-1);
  if (!call) {
    call = { index: typeof index === 'number' ? index : list.length, id: '', name: '', arguments: '' } as T;
    list.push(call);
    list.sort((a, b) => a.index - b.index);
  }
  if (id !== undefined) call.id = id;
  if (fn && typeof fn.name === 'string' && fn.name !== '') call.name = fn.name;
  if (fn && typeof fn.arguments === 'string') call.arguments += fn.arguments;
  return list;
}
