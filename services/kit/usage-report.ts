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

/** `model=…&provider=…&prompt_tokens=…` (URL-encoded, so any model id is a valid header value). */
export function encodeUsageReport(report: UsageReport): string {
  const params = new URLSearchParams({ model: report.model, prompt_tokens: String(report.prompt_tokens), completion_tokens: String(report.completion_tokens), total_tokens: String(report.total_tokens) });
  if (report.provider) params.set('provider', report.provider);
  return params.toString();
}

/** The report a header or trailer carried; undefined when it is absent or malformed (never thrown). */
export function decodeUsageReport(value: string | string[] | undefined): UsageReport | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return undefined;
  const params = new URLSearchParams(text);
  const model = params.get('model');
  if (!model) return undefined;
  const count = (name: string) => {
    const n = Number(params.get(name));
    return Number.isFinite(n) && n >= 0 ? Math.floor(n) : 0;
  };
  return { model, provider: params.get('provider'), prompt_tokens: count('prompt_tokens'), completion_tokens: count('completion_tokens'), total_tokens: count('total_tokens') };
}
