import { ApiError } from '../../kit/index.js';

/**
 * What a provider's error becomes for the client, and for the logs.
 *
 * Clients never see a provider's text: an upstream that echoes its request, or a 401 that quotes
 * the key, would hand the provider's API key and internal host names to any user. They get a
 * stable message of ours with the upstream status and a provider-neutral code. Only for 400s that
 * help the client (the context is too long, a value is unsupported) the known OpenAI error codes,
 * and a `param` naming a request field, are mapped through; never free text.
 *
 * The upstream body goes to the logs only after `redactSecrets`.
 */

/** Known OpenAI (and OpenAI-compatible server) 400 error codes → our message. The code is kept. */
const KNOWN_CODES: Record<string, string> = {
  context_length_exceeded: "The input is longer than the model's context window.",
  string_above_max_length: 'A string in the request is longer than the model provider allows.',
  array_above_max_length: 'An array in the request has more items than the model provider allows.',
  empty_array: 'An array in the request must not be empty for this model.',
  invalid_value: 'A parameter has a value the model does not accept.',
  unsupported_value: 'A parameter has a value this model does not support.',
  unsupported_parameter: 'A parameter is not supported by this model.',
  invalid_type: 'A parameter has a type this model does not accept.',
  missing_required_parameter: 'A parameter this model requires is missing.',
  integer_above_max_value: 'A number in the request is above what the model provider allows.',
  integer_below_min_value: 'A number in the request is below what the model provider allows.',
  decimal_above_max_value: 'A number in the request is above what the model provider allows.',
  decimal_below_min_value: 'A number in the request is below what the model provider allows.',
  invalid_image_url: 'An image in the request could not be fetched by the model provider.',
  image_parse_error: 'An image in the request could not be read by the model provider.',
  invalid_image: 'An image in the request could not be read by the model provider.',
  content_policy_violation: "The model provider's content policy refused the request.",
  content_filter: "The model provider's content policy refused the request.",
};

/** Servers that send no code but say it in words (vLLM, llama.cpp, TGI): read, never forwarded. */
const CONTEXT_TOO_LONG = /maximum context length|context length|context window|too many tokens|exceeds? the (?:model's )?(?:maximum|max)/i;

const PARAM = /^[A-Za-z_][A-Za-z0-9_]{0,63}(?:\[\d{1,6}\]|\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,8}$/;

export interface UpstreamErrorDetail {
  code: string | null;
  param: string | null;
  message: string;
}

/** Picks `{error: {message, code, param}}` (or `{message}`, `{error: "…"}`) out of a body, if it is JSON. */
export function parseUpstreamError(text: string): UpstreamErrorDetail {
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown; param?: unknown; code?: unknown } | string; message?: unknown };
    const err = typeof parsed?.error === 'object' && parsed.error !== null ? parsed.error : undefined;
    const message = err?.message ?? (typeof parsed?.error === 'string' ? parsed.error : parsed?.message);
    return {
      code: typeof err?.code === 'string' ? err.code : null,
      param: typeof err?.param === 'string' ? err.param : null,
      message: typeof message === 'string' ? message : '',
    };
  } catch {
    return { code: null, param: null, message: text };
  }
}

/**
 * The client error for an upstream 4xx other than 401/403/404/429 (the request's fault).
 * `knownFields`: top-level request fields a mapped `param` may start with.
 */
export function clientErrorFor(status: number, text: string, knownFields: ReadonlySet<string>): ApiError {
  const detail = parseUpstreamError(text);
  let code = detail.code && Object.hasOwn(KNOWN_CODES, detail.code) ? detail.code : null;
  if (!code && CONTEXT_TOO_LONG.test(detail.message)) code = 'context_length_exceeded';
  const param = detail.param && PARAM.test(detail.param) && knownFields.has(detail.param.split(/[.[]/)[0]!) ? detail.param : null;
  const clientStatus = status === 413 ? 413 : 400;
  if (code) return new ApiError(clientStatus, `${KNOWN_CODES[code]} (upstream status ${status})`, { code, param: param ?? (code === 'context_length_exceeded' ? 'messages' : null) });
  return new ApiError(clientStatus, `The model provider rejected the request (upstream status ${status})`, {
    code: clientStatus === 413 ? 'payload_too_large' : 'upstream_invalid_request',
    param,
  });
}

const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{4,}/gi;
const KEY_LIKE = /\b(?:sk|pk|rk|ak|key|api|token)[-_](?:[A-Za-z0-9]+[-_])*[A-Za-z0-9]{12,}/gi;
const JWT_LIKE = /\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}/g;
const NAMED_SECRET = /("?(?:api[-_]?key|x-api-key|authorization|access[-_]?token|secret|password)"?\s*[:=]\s*"?)([^"\s,}]{4,})/gi;

/**
 * Removes what must never reach a log: the given secrets (the provider's configured key) wherever
 * they appear, bearer/basic credentials, things shaped like API keys or JWTs, and the values of
 * fields named like secrets. Cut to `max` characters.
 */
export function redactSecrets(text: string, secrets: ReadonlyArray<string | null | undefined>, max = 2000): string {
  let out = text.length > max * 4 ? text.slice(0, max * 4) : text;
  for (const secret of secrets) {
    if (secret && secret.length >= 4) out = out.split(secret).join('[redacted]');
  }
  out = out
    .replace(BEARER, '$1 [redacted]')
    .replace(JWT_LIKE, '[redacted-jwt]')
    .replace(KEY_LIKE, '[redacted-key]')
    .replace(NAMED_SECRET, '$1[redacted]');
  return out.length > max ? `${out.slice(0, max)}…` : out;
}
