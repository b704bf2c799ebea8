import { createHash, createHmac } from 'node:crypto';

/**
 * An independent SigV4 check of a presigned S3 URL (query-string authentication). s3rver, the
 * S3 server the tests run, does not verify signatures, so the tests recompute them here from the
 * secret, following AWS's published algorithm: canonical request → string to sign → key chain.
 */
const encode = (value: string) => encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
const hmac = (key: Buffer | string, data: string) => createHmac('sha256', key).update(data).digest();

export function expectedSignature(url: string, method: string, headers: Record<string, string>, secret: string): string {
  const u = new URL(url);
  const params = [...u.searchParams.entries()].filter(([k]) => k !== 'X-Amz-Signature');
  const query = params
    .map(([k, v]) => [encode(k), encode(v)] as const)
    .sort(([a, av], [b, bv]) => (a < b ? -1 : a > b ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const signedHeaders = u.searchParams.get('X-Amz-SignedHeaders')!.split(';');
  const all: Record<string, string> = { host: u.host, ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])) };
  const canonicalHeaders = signedHeaders.map((h) => `${h}:${(all[h] ?? '').trim()}\n`).join('');
  const canonicalRequest = [method, u.pathname, query, canonicalHeaders, signedHeaders.join(';'), 'UNSIGNED-PAYLOAD'].join('\n');
  const amzDate = u.searchParams.get('X-Amz-Date')!;
  const [, date, region, service] = /^[^/]+\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request$/.exec(u.searchParams.get('X-Amz-Credential')!)!;
  const scope = `${date}/${region}/${service}/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, createHash('sha256').update(canonicalRequest).digest('hex')].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${secret}`, date!), region!), service!), 'aws4_request');
  return createHmac('sha256', key).update(stringToSign).digest('hex');
}

/** X-Amz-Date (YYYYMMDDTHHMMSSZ) as Unix seconds. */
export function amzDateSeconds(value: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value)!;
  return Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!) / 1000;
}
