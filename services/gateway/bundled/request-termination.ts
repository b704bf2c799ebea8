import type { Decision, PluginCore } from '../../../plugins/core/index.js';

/** Kong's bundled `request-termination` (priority 2): answers with a fixed status and body. */
export const PRIORITY = 2;

export interface RequestTerminationConfig {
  status_code?: number;
  message?: string;
  body?: string;
  content_type?: string;
}

export function createRequestTermination(config: RequestTerminationConfig): PluginCore {
  const status = config.status_code ?? 503;
  let decision: Decision;
  if (config.body !== undefined && config.body !== null) {
    const contentType = config.content_type ?? 'application/json; charset=utf-8';
    decision = { kind: 'respond', status, body: Buffer.from(config.body), headers: { 'Content-Type': contentType } };
  } else {
    decision = { kind: 'respond', status, body: { message: config.message ?? 'Service unavailable' } };
  }
  return { access: () => decision };
}
