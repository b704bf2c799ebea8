/**
 * A raw request through the edge, for suites that send bodies the SDKs would refuse to build
 * (hostile strings, fuzzed JSON). Authenticates with a bearer token or an API key. `json` is the
 * parsed body, or undefined when the body is not JSON; `text` is the body as received.
 */
export interface EdgeReply {
  status: number;
  json: any;
  text: string;
}

export async function edgeCall(
  baseUrl: string,
  method: string,
  path: string,
  options: { body?: string; bearer?: string; apiKey?: string; headers?: Record<string, string> } = {},
): Promise<EdgeReply> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.bearer) headers.authorization = `Bearer ${options.bearer}`;
  else if (options.apiKey) headers['x-api-key'] = options.apiKey;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(baseUrl + path, { method: method.toUpperCase(), headers, body: options.body });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text };
}
