import type { Response } from 'express';

/**
 * JSON-RPC 2.0 error objects. /v1/mcp answers errors in this form (not the platform's
 * `{"error":{"type","code","message","param"}}` body), because MCP clients read JSON-RPC.
 */
export const JSONRPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  /** Transport-level refusals (wrong method, body too large, unsupported media type). */
  serverError: -32000,
} as const;

export function jsonRpcError(code: number, message: string, id: string | number | null = null, data?: unknown) {
  return { jsonrpc: '2.0' as const, id, error: data === undefined ? { code, message } : { code, message, data } };
}

export function sendJsonRpcError(res: Response, status: number, code: number, message: string, headers: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res.status(status).set(headers).json(jsonRpcError(code, message));
}
