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

/** A content part of a message: the model's text, or its refusal (OpenAI's structured refusal). */
type TextPart = { type: 'output_text'; text: string; annotations: unknown[]; logprobs: unknown[] };
type RefusalPart = { type: 'refusal'; refusal: string };

interface OpenMessage {
  item: Record<string, any> & { content: Array<TextPart | RefusalPart> };
  /** The part being written (the last of `item.content`), null before the first. */
  part: TextPart | RefusalPart | null;
  at: { item_id: string; output_index: number; content_index: number };
}

/** What a step answered besides tool calls: its text and its refusal (either may be empty). */
export interface StepAnswer {
  text: string;
  refusal: string;
}

export class ResponseRecorder {
  private sequence = 0;
  /** The message a streamed step is writing into, and blank text received before it opened. */
  private streamed: OpenMessage | null = null;
  private blankPrefix = '';
  constructor(
    readonly response: ResponseObject,
    private readonly emit?: (event: StreamEvent) => void,
    /** A promise while the streaming caller's connection is full (see `EventStreamWriter`). */
    readonly drained?: () => Promise<void> | null,
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

  /**
   * A background response is created `queued` and says so (`response.queued`, as OpenAI streams
   * it), then runs; a foreground one is created `in_progress`.
   */
  start(): void {
    if (this.response.status !== 'queued') this.response.status = 'in_progress';
    this.send('response.created', { response: this.snapshot() });
    if (this.response.status === 'queued') this.send('response.queued', { response: this.snapshot() });
    this.response.status = 'in_progress';
    this.send('response.in_progress', { response: this.snapshot() });
  }

  /**
   * A whole step's answer as one message item (a non-streaming caller, or a step answered at once),
   * streamed in pieces of `DELTA_CHARS`: an `output_text` part for the text (an empty one for a step
   * that answered nothing at all), then a `refusal` part for the refusal, when there is one. Text
   * that is blank beside a refusal makes no part.
   */
  message(answer: StepAnswer, status: 'completed' | 'incomplete' = 'completed'): void {
    const open = this.openMessage();
    const { text, refusal } = answer;
    if (text.trim() || !refusal) {
      this.openPart(open, 'output_text');
      for (let i = 0; i < text.length; i += DELTA_CHARS) this.appendText(open, text.slice(i, i + DELTA_CHARS));
    }
    for (let i = 0; i < refusal.length; i += DELTA_CHARS) this.appendRefusal(open, refusal.slice(i, i + DELTA_CHARS));
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

  /** A piece of the step's refusal as the provider streams it: a `refusal` part of the step's message (opened by the first piece). */
  refusalDelta(delta: string): void {
    if (!delta) return;
    this.streamed ??= this.openMessage();
    this.blankPrefix = '';
    this.appendRefusal(this.streamed, delta);
  }

  /**
   * The step's answer is complete: a message streamed by `textDelta`/`refusalDelta` is closed;
   * otherwise the whole answer becomes a message when `keepBlank` (a step that ends the response),
   * when its text is not blank, or when it refused. `incomplete`: the provider cut the text off
   * (`finish_reason: "length"`).
   */
  endText(answer: StepAnswer, keepBlank: boolean, status: 'completed' | 'incomplete' = 'completed'): void {
    const open = this.streamed;
    this.streamed = null;
    this.blankPrefix = '';
    if (open) this.closeMessage(open, status);
    else if (keepBlank || answer.text.trim() || answer.refusal) this.message(answer, status);
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
    const item = { id, type: 'message', role: 'assistant', status: 'in_progress', content: [] as OpenMessage['item']['content'] };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: structuredClone(item) });
    return { item, part: null, at: { item_id: id, output_index: outputIndex, content_index: -1 } };
  }

  /** Closes the part being written (if any) and opens one of `type` after it. */
  private openPart(open: OpenMessage, type: 'output_text' | 'refusal'): void {
    this.closePart(open);
    const part: TextPart | RefusalPart = type === 'output_text' ? { type, text: '', annotations: [], logprobs: [] } : { type, refusal: '' };
    open.item.content.push(part);
    open.part = part;
    open.at = { ...open.at, content_index: open.item.content.length - 1 };
    this.send('response.content_part.added', { ...open.at, part: { ...part } });
  }

  private closePart(open: OpenMessage): void {
    const part = open.part;
    if (!part) return;
    open.part = null;
    if (part.type === 'output_text') this.send('response.output_text.done', { ...open.at, text: part.text, logprobs: [] });
    else this.send('response.refusal.done', { ...open.at, refusal: part.refusal });
    this.send('response.content_part.done', { ...open.at, part: { ...part } });
  }

  private appendText(open: OpenMessage, delta: string): void {
    if (open.part?.type !== 'output_text') this.openPart(open, 'output_text');
    (open.part as TextPart).text += delta;
    this.send('response.output_text.delta', { ...open.at, delta, logprobs: [] });
  }

  private appendRefusal(open: OpenMessage, delta: string): void {
    if (open.part?.type !== 'refusal') this.openPart(open, 'refusal');
    (open.part as RefusalPart).refusal += delta;
    this.send('response.refusal.delta', { ...open.at, delta });
  }

  /**
   * `incomplete`: the step stopped inside its text (cancelled, failed, cut off at the token limit);
   * the text so far is kept. A message holds at least one part (an empty `output_text` when nothing
   * was written).
   */
  private closeMessage(open: OpenMessage, status: 'completed' | 'incomplete'): void {
    if (open.item.content.length === 0) this.openPart(open, 'output_text');
    this.closePart(open);
    const { item, at } = open;
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
    // As OpenAI orders them: the call is in progress, then its arguments.
    this.send('response.mcp_call.in_progress', { item_id: id, output_index: outputIndex });
    item.arguments = call.arguments;
    this.send('response.mcp_call_arguments.delta', { item_id: id, output_index: outputIndex, delta: call.arguments });
    this.send('response.mcp_call_arguments.done', { item_id: id, output_index: outputIndex, arguments: call.arguments });
    return outputIndex;
  }

  /**
   * A platform tool call the model asked for that is not run (the step limit was reached): announced
   * and done at once, `incomplete` with `error` saying why, never `in_progress`.
   */
  unrunMcpCall(call: { name: string; arguments: string; serverLabel: string }, error: string): void {
    const id = newId('mcpCall');
    const outputIndex = this.response.output.length;
    const item: Record<string, any> = { id, type: 'mcp_call', server_label: call.serverLabel, name: call.name, arguments: '', status: 'in_progress', output: null, error: null };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: { ...item } });
    item.arguments = call.arguments;
    this.send('response.mcp_call_arguments.delta', { item_id: id, output_index: outputIndex, delta: call.arguments });
    this.send('response.mcp_call_arguments.done', { item_id: id, output_index: outputIndex, arguments: call.arguments });
    item.status = 'incomplete';
    item.error = error;
    this.send('response.output_item.done', { output_index: outputIndex, item: { ...item } });
  }

  finishMcpCall(outputIndex: number, result: { output: string; error: string | null }): void {
    const item = this.response.output[outputIndex]!;
    item.output = result.output;
    item.error = result.error;
    item.status = result.error ? 'failed' : 'completed';
    this.send(result.error ? 'response.mcp_call.failed' : 'response.mcp_call.completed', { item_id: item.id, output_index: outputIndex });
    this.send('response.output_item.done', { output_index: outputIndex, item: { ...item } });
  }

  /** The one terminal event. */
  finish(): void {
    this.emit?.(this.end());
  }

  /**
   * The one terminal event, numbered but not sent (instead of `finish`): for a caller that hands it
   * to its receivers at different moments (the event log before the conversation append, the
   * creator's stream after it).
   */
  end(): StreamEvent {
    return { type: terminalEventType(this.response.status), sequence_number: this.sequence++, response: this.snapshot() } as StreamEvent;
  }
}

/** The terminal event of a response that ended `status`: a cancelled one ends with `response.incomplete` carrying `status: "cancelled"`. */
export function terminalEventType(status: string): 'response.completed' | 'response.failed' | 'response.incomplete' {
  return status === 'completed' ? 'response.completed' : status === 'failed' ? 'response.failed' : 'response.incomplete';
}
