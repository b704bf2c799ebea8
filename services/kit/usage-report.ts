/**
 * What a service tells the edge about a request it served, for the edge's access log line: the
 * model, the provider and the token counts of a chat completion. The service sends it in the
 * `X-Usage-Report` response header (a JSON answer: its usage is known before the head is sent) or
 * as an HTTP trailer of that name (a stream: the counts arrive with its last event). The edge reads
 * it and removes it, so clients never see it; it carries no secret and no prompt text.
 */
export const USAGE_REPORT_HEADER = 'x-usage-report';
/**
 * The request header with which the embedded edge asks for the report. A service sends the report
 * only when asked: Kong (which cannot remove a response header or read a trailer through our
 * plugins) never asks, so its clients never see the report. The `X-Gateway-` prefix is one the
 * identity-headers plugin strips from client requests on both hosts, so a client cannot ask for it.
 */
export const USAGE_REPORT_REQUEST_HEADER = 'x-gateway-usage-report';

/** Whether the request came from an edge that takes the report off the answer. */
export function edgeWantsUsageReport(headers: Record<string, string | string[] | undefined>): boolean {
  return headers[USAGE_REPORT_REQUEST_HEADER] === '1';
}

export interface UsageReport {
  model: string;
  provider: string | null;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * `model=…&prompt_tokens=…&completion_tokens=…&total_tokens=…&provider=…`, form-encoded, so any
 * model id is a valid header value. Written and read here without URLSearchParams, which cost ~1 %
 * of a chat request in process (four calls, each making an object and its list of pairs); the format
 * is the one URLSearchParams writes and reads, so edges and services of different versions agree.
 */
export function encodeUsageReport(report: UsageReport): string {
  const text = `model=${formEncode(report.model)}&prompt_tokens=${count(report.prompt_tokens)}&completion_tokens=${count(report.completion_tokens)}&total_tokens=${count(report.total_tokens)}`;
  return report.provider ? `${text}&provider=${formEncode(report.provider)}` : text;
}

/** The report a header or trailer carried; undefined when it is absent or malformed (never thrown). */
export function decodeUsageReport(value: string | string[] | undefined): UsageReport | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return undefined;
  let model: string | undefined;
  let provider: string | undefined;
  let prompt: string | undefined;
  let completion: string | undefined;
  let total: string | undefined;
  // The first value of a name wins, as URLSearchParams.get reads it; other names are ignored.
  for (const pair of text.split('&')) {
    const at = pair.indexOf('=');
    if (at < 0) continue; // a name without a value reads as '', which no field accepts
    const raw = pair.slice(at + 1);
    switch (pair.slice(0, at)) {
      case 'model':
        model ??= formDecode(raw);
        break;
      case 'provider':
        provider ??= formDecode(raw);
        break;
      case 'prompt_tokens':
        prompt ??= formDecode(raw);
        break;
      case 'completion_tokens':
        completion ??= formDecode(raw);
        break;
      case 'total_tokens':
        total ??= formDecode(raw);
        break;
    }
  }
  if (!model) return undefined;
  return { model, provider: provider || null, prompt_tokens: tokens(prompt), completion_tokens: tokens(completion), total_tokens: tokens(total) };
}

function tokens(raw: string | undefined): number {
  const n = Number(raw ?? '');
  return Number.isFinite(n) && n >= 0 ? Math.floor(n) : 0;
}

const count = (n: number) => (Number.isFinite(n) ? String(n) : '0');

/** application/x-www-form-urlencoded, as URLSearchParams writes it (space as `+`). */
const formEncode = (value: string) => (/^[\w.-]*$/.test(value) ? value : encodeURIComponent(value).replace(/%20/g, '+').replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`));

/** The inverse; a malformed escape (only a broken or hostile service sends one) leaves the value as it stands. */
function formDecode(value: string): string {
  const spaced = value.includes('+') ? value.replace(/\+/g, ' ') : value;
  if (!spaced.includes('%')) return spaced;
  try {
    return decodeURIComponent(spaced);
  } catch {
    return spaced;
  }
}
