import { randomBase62 } from '../../kit/index.js';

/**
 * Builds the Responses object and, at the same time, the event stream a streaming client sees
 * (response.created first, output_item.added/done around every item, content_part.added/done
 * around the text, sequence_number +1, one terminal event carrying the whole response). A
 * non-streaming caller gets the same object with the events dropped, so the two never differ.
 */
export type ResponseObject = Record<string, any> & { id: string; status: string; output: Array<Record<string, any>> };
export type StreamEvent = Record<string, any> & { type: string; sequence_number: number };

export const itemId = (prefix: string) => `${prefix}_${randomBase62(24)}`;

/** Text is streamed in pieces of about this size (the upstream step answers whole). */
const DELTA_CHARS = 64;

export class ResponseRecorder {
  private sequence = 0;
  constructor(
    readonly response: ResponseObject,
    private readonly emit: (event: StreamEvent) => void = () => {},
  ) {}

  private send(type: string, fields: Record<string, unknown>): void {
    this.emit({ type, sequence_number: this.sequence++, ...fields } as StreamEvent);
  }

  private snapshot(): ResponseObject {
    return structuredClone(this.response);
  }

  start(): void {
    this.response.status = 'in_progress';
    this.send('response.created', { response: this.snapshot() });
    this.send('response.in_progress', { response: this.snapshot() });
  }

  message(text: string): void {
    const id = itemId('msg');
    const outputIndex = this.response.output.length;
    const item = { id, type: 'message', role: 'assistant', status: 'in_progress', content: [] as any[] };
    this.response.output.push(item);
    this.send('response.output_item.added', { output_index: outputIndex, item: structuredClone(item) });
    const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
    item.content.push(part);
    const at = { item_id: id, output_index: outputIndex, content_index: 0 };
    this.send('response.content_part.added', { ...at, part: { ...part } });
    for (let i = 0; i < text.length; i += DELTA_CHARS) {
      const delta = text.slice(i, i + DELTA_CHARS);
      part.text += delta;
      this.send('response.output_text.delta', { ...at, delta, logprobs: [] });
    }
    this.send('response.output_text.done', { ...at, text, logprobs: [] });
    this.send('response.content_part.done', { ...at, part: { ...part } });
    item.status = 'completed';
    this.send('response.output_item.done', { output_index: outputIndex, item: structuredClone(item) });
  }

  /** A call the client executes itself: announced and finished at once. */
  functionCall(call: { call_id: string; name: string; arguments: string }): void {
    const id = itemId('fc');
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
    const id = itemId('mcp');
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
