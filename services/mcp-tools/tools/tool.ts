import { z } from 'zod';
import type { ProgressReporter } from './progress.js';

/**
 * One MCP tool: its name, a description a model can act on, zod schemas for input and output
 * (the same objects validate calls and become the JSON Schemas `tools/list` publishes) and a
 * handler. Each tool lives in its own file; `tools/index.ts` lists them in their fixed order.
 */
export interface ToolCallContext {
  /** The platform user the call runs as (identity from the edge). */
  userId: string;
  /** Aborted when the client goes away or cancels the request. */
  signal: AbortSignal;
  /** The JSON-RPC id of the tools/call request (what a client's notifications/cancelled names). */
  requestId?: string | number;
  /** Arguments that fail the input schema are answered as an error result, not a JSON-RPC error (protocol 2025-11-25 on). */
  argumentErrorsAsResults?: boolean;
  /** The admission number of the POST carrying the call (`ToolCaller.admit`), for a cancel that overtook it. */
  admission?: number;
  /** Sends the client a progress notification; set when the call's `_meta` carries a `progressToken`. */
  reportProgress?: ProgressReporter;
}

export interface ToolOutput<O> {
  structured: O;
  /** The text rendering (the first content block), for clients that ignore structured content. */
  text: string;
}

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
}

export interface McpTool<I = any, O = any> {
  name: string;
  title: string;
  description: string;
  input: z.ZodType<I>;
  output: z.ZodType<O>;
  annotations: ToolAnnotations;
  /** Why the tool cannot work in this deployment (missing backend or sandbox), or null; shown to administrators. */
  unavailableReason?(): string | null;
  run(ctx: ToolCallContext, input: I): Promise<ToolOutput<O>>;
}

export const defineTool = <I, O>(tool: McpTool<I, O>): McpTool => tool as McpTool;

/** A failure the caller should read (bad URL, backend down, disabled tool): an `isError` result, not a JSON-RPC error. */
export class ToolFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ToolFailure';
  }
}

/** JSON Schema (draft-07, which MCP clients validate with) of a zod schema, as `tools/list` publishes it. */
export function jsonSchemaOf(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { target: 'draft-7', io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}
