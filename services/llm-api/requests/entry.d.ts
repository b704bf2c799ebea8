// The kit's declaration file itself, not a kit entry: an entry is compiled code, and the web
// console's build would compile it too.
import type { RequestOutcome } from '../../kit/request-outcome.js';

/**
 * One entry of the recent-requests log as the admin API shows it (GET /v1/admin/requests): the
 * outcome of a request (its id as `id`) with who made it and, for chat, model, provider and
 * tokens. A declaration file, so the web console can read the same shape without compiling
 * service code into its bundle; the schema in requests.ts is checked against it.
 */
export interface RequestLogEntry extends Omit<RequestOutcome, 'request_id'> {
  object: 'request';
  /** The request id (X-Request-ID). */
  id: string;
  auth_method: string | null;
  key_id: string | null;
  model: string | null;
  provider_id: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  total_tokens: number | null;
  /** When the request ended (Unix seconds). */
  created_at: number;
}
