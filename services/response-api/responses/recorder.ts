import { newId } from '../../kit/index.js';

/**
 * Builds the Responses object and, at the same time, the event stream a streaming client sees
 * (response.created first, output_item.added/done around every item, content_part.added/done
 * around the text, sequence_number +1, one terminal event carrying the whole response). A
 * non-streaming caller gets the same object with the events dropped, so the two never differ.
 */
export type ResponseObject = Record<string, any> & { id: string; status: string; output: Array<Record<string, any>> };
export type StreamEvent = Record<string, any> & { type: string; sequence_number: number };

/** Text that arrives whole (a step not streamed from the provider) is sent in pieces of this size. */
const DELTA_CHARS = 64;

interface OpenMessage {
  item: Record<string, any> & { content: any[] };
  part: { type: string; text: string; annotations: unknown[]; logprobs: unknown[] };
  at: { item_id: string; output_index: number; content_index: number };
}

export class ResponseRecorder {
  private sequence = 0;
  /** The message a streamed step is writing into, and blank text received before it opened. */
  private streamed: OpenMessage | null = null;
  private blankPrefix = '';
  constructor(
    readonly response: ResponseObject,
    private readonly emit?: (event: StreamEvent) => void,
  ) {}

  /** Someone receives the events (a streaming caller): steps are then worth streaming from the provider. */
  get streaming(): boolean {
    return this.emit !== undefined;
  }

  private send(type: string, fields: Record<string, unknown>): void {
    this.emit?.({ type, sequence_number: this.sequence++, ...fields } as StreamEvent);
  }

  private snapshot(): ResponseObject {
    return structuredClone(this.response);
  }

  /** A background response is created `queued` (as OpenAI streams it), then runs. */
  start(): void {
    if (this.response.status !== 'queued') this.response.status = 'in_progress';
    this.send('response.created', { response: this.snapshot() });
    this.response.status = 'in_progress';
    this.send('response.in_progress', { response: this.snapshot() });
  }

  /**
   * A whole step's text as one message item (a non-streaming caller, or a step answered at once),
   * streamed in pieces of `DELTA_CHARS`.
   */
  message(text: string, status: 'completed' | 'incomplete' = 'completed'): void {
    const open = this.openMessage();
    for (let i = 0; i < text.length; i += DELTA_CHARS) this.appendText(open, text.slice(i, i + DELTA_CHARS));
    this.closeMessage(open, status);
  }

  /**
   * A piece of the step's text as the provider streams it. The message item opens with the first
   * piece that is not blank: a step that only calls tools may send whitespace first, and a blank
   * message is not kept beside tool calls (the same rule as `endText`).
   */
  textDelta(delta: string): void {
    if (this.streamed) return this.appendText(this.streamed, delta);
    this.blankPrefix += delta;
    if (!this.blankPrefix.trim()) return;
    this.streamed = this.openMessage();
    this.appendText(this.streamed, this.blankPrefix);
    this.blankPrefix = '';
  }

  /**
   * The step's text is complete: a message streamed by `textDelta` is closed; otherwise the whole
   * text becomes a message when `keepBlank` (a step that ends the response) or when it is not blank.
   * `incomplete`: the provider cut the text off (`finish_reason: "length"`).
   */
  endText(text: string, keepBlank: boolean, status: 'completed' | 'incomplete' = 'completed'): void {
    const open = this.streamed;
    this.streamed = null;
    this.blankPrefix = '';
    if (open) this.closeMessage(open, status);
    else if (keepBlank || text.trim()) this.message(text, status);
  }

  /** The loop stopped inside a streamed text (cancelled, failed): its message ends `incomplete`, the text so far kept. */
  interruptText(): void {
    if (this.streamed) this.closeMessage(this.streamed, 'incomplete');
    this.streamed = null;
    this.blankPrefix = '';
  }

  /** The loop stopped while platform tool calls were announced but not finished: each ends `failed` with `error`. */
  interruptCalls(error: string): void {
    this.response.output.forEach((item, index) => {
      if (item.type === 'mcp_call' && item.status === 'in_progress') this.finishMcpCall(index, { output: '', error });
    });
  }

  private openMessage(): OpenMessage {
    const id = newId('message');
    const outputIndex = this.response.output.length;
    const item = { id, type: 'message', role: 'assistant', status: 'in_progress', content: [] as any[] };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: structuredClone(item) });
    const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
    item.content.push(part);
    const at = { item_id: id, output_index: outputIndex, content_index: 0 };
    this.send('response.content_part.added', { ...at, part: { ...part } });
    return { item, part, at };
  }

  private appendText(open: OpenMessage, delta: string): void {
    open.part.text += delta;
    this.send('response.output_text.delta', { ...open.at, delta, logprobs: [] });
  }

  /** `incomplete`: the step stopped inside its text (cancelled, failed, cut off at the token limit); the text so far is kept. */
  private closeMessage(open: OpenMessage, status: 'completed' | 'incomplete'): void {
    const { item, part, at } = open;
    this.send('response.output_text.done', { ...at, text: part.text, logprobs: [] });
    this.send('response.content_part.done', { ...at, part: { ...part } });
    item.status = status;
    this.send('response.output_item.done', { output_index: at.output_index, item: structuredClone(item) });
  }

  /** A call the client executes itself: announced and finished at once. */
  functionCall(call: { call_id: string; name: string; arguments: string }): void {
    const id = newId('functionCall');
    const outputIndex = this.response.output.length;
    const item = { id, type: 'function_call', status: 'in_progress', call_id: call.call_id, name: call.name, arguments: '' };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: { ...item } });
    item.arguments = call.arguments;
    this.send('response.function_call_arguments.delta', { item_id: id, output_index: outputIndex, delta: call.arguments });
    this.send('response.function_call_arguments.done', { item_id: id, output_index: outputIndex, name: call.name, arguments: call.arguments });
    item.status = 'completed';
    this.send('response.output_item.done', { output_index: outputIndex, item: { ...item } });
  }

  /** A platform tool call: announced now, finished with `finishMcpCall` once the tool answered. */
  startMcpCall(call: { name: string; arguments: string; serverLabel: string }): number {
    const id = newId('mcpCall');
    const outputIndex = this.response.output.length;
    const item: Record<string, any> = { id, type: 'mcp_call', server_label: call.serverLabel, name: call.name, arguments: '', status: 'in_progress', output: null, error: null };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: { ...item } });
    item.arguments = call.arguments;
    this.send('response.mcp_call_arguments.delta', { item_id: id, output_index: outputIndex, delta: call.arguments });
    this.send('response.mcp_call_arguments.done', { item_id: id, output_index: outputIndex, arguments: call.arguments });
    this.send('response.mcp_call.in_progress', { item_id: id, output_index: outputIndex });
    return outputIndex;
  }

  finishMcpCall(outputIndex: number, result: { output: string; error: string | null }): void {
    const item = this.response.output[outputIndex]!;
    item.output = result.output;
    item.error = result.error;
    item.status = result.error ? 'failed' : 'completed';
    this.send(result.error ? 'response.mcp_call.failed' : 'response.mcp_call.completed', { item_id: item.id, output_index: outputIndex });
    this.send('response.output_item.done', { output_index: outputIndex, item: { ...item } });
  }

  /** The one terminal event. A cancelled response ends with `response.incomplete` carrying `status: "cancelled"`. */
  finish(): void {
    const status = this.response.status;
    const type = status === 'completed' ? 'response.completed' : status === 'failed' ? 'response.failed' : 'response.incomplete';
    this.send(type, { response: this.snapshot() });
  }
}
