import type { Readable } from 'node:stream';
import { Agent, request, type Dispatcher } from 'undici';
import { EgressRefusedError, type EgressGuard } from '../../services/kit/index.js';
import { providerConnectOptions, type ProviderHttpVersion } from './provider-connections.js';
import { endpointsOf, type ProviderRow } from './providers-store.js';
import { checkUpstreamEntry, type SkippedModel } from './upstream-entry.js';

/**
 * The upstream model-list client: reads a provider's OpenAI-compatible `GET {endpoint}/models`,
 * trying its endpoints in priority order. llm-api hands it the connection pool its chat path uses;
 * the provider-sync worker, which runs without llm-api, builds one with `createModelListClient`.
 */
export interface ModelListClient {
  getJson(url: string, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; body: unknown }>;
}

/** A model entry of a provider's list, as `checkUpstreamEntry` (upstream-entry.ts) lets it through. */
export interface UpstreamModel {
  id: string;
  owned_by?: string;
  created?: number;
  name?: string;
  description?: string;
  context_length?: number;
  max_model_len?: number;
  architecture?: Record<string, unknown>;
  supported_parameters?: string[];
  top_provider?: { context_length?: number; max_completion_tokens?: number };
}


/** `https://host/v1/` + `models` → `https://host/v1/models`. */
export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}

/** The `Authorization` value for a provider's API key; undefined for a provider without one. */
export function bearer(apiKey: string | null): string | undefined {
  return apiKey ? `Bearer ${apiKey}` : undefined;
}

export function authHeaders(apiKey: string | null): Record<string, string> {
  const authorization = bearer(apiKey);
  return authorization ? { authorization } : {};
}

/** Default cap of a provider's JSON answer (model lists, probes): a hostile endpoint cannot exhaust memory. */
export const PROVIDER_JSON_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Most entries a provider's model list may have: a longer list is refused whole (the sync fails,
 * nothing changes). Bytes alone do not bound the work: 16 MiB of `[0,0,…]` is 8 million entries,
 * each of which would become a skipped-entry record (over a gigabyte of heap), and as many ids
 * would each become a catalog entry.
 */
export const MAX_UPSTREAM_MODELS = 10_000;

/**
 * `GET url` as JSON on `dispatcher`, guarded like every provider call (PROVIDER_URL_ALLOW), with one
 * timeout for headers and body, reading at most `maxBytes` (more: the connection is cut and it throws).
 * A body that is not JSON comes back as text. Used by the catalog's own client and by llm-api's pool.
 */
export async function getProviderJson(
  dispatcher: Dispatcher,
  url: string,
  headers: Record<string, string>,
  options: { timeoutMs: number; guard?: EgressGuard; maxBytes?: number },
): Promise<{ status: number; body: unknown }> {
  options.guard?.checkUrl(url);
  const res = await request(url, {
    method: 'GET',
    headers: { accept: 'application/json', ...headers },
    dispatcher,
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
    signal: AbortSignal.timeout(options.timeoutMs),
  });
  const max = options.maxBytes ?? PROVIDER_JSON_MAX_BYTES;
  const read = await readCapped(res.body, max);
  if (read.truncated) throw new Error(`the provider's answer is larger than ${max} bytes`);
  const text = read.bytes.toString('utf8');
  try {
    return { status: res.statusCode, body: JSON.parse(text) as unknown };
  } catch {
    return { status: res.statusCode, body: text };
  }
}

const ignore = () => {};

/**
 * Reads at most `max` bytes of a body; the rest is not read (the connection is cut). Read with
 * the stream's own events rather than `for await`: a provider's answer is usually one chunk, and an
 * async iterator (its promises, its end-of-stream watcher) cost more than the read on every chat
 * request. A body that closes before its end, or fails, rejects as `for await` would.
 */
export function readCapped(body: Readable, max: number): Promise<{ bytes: Buffer; truncated: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('close', onClose);
      body.off('error', onError);
      // Once read or cut, a later error (undici reports its own cut as an AbortError) changes nothing.
      body.once('error', ignore);
    };
    const onData = (buf: Buffer) => {
      if (size + buf.length <= max) {
        chunks.push(buf);
        size += buf.length;
        return;
      }
      chunks.push(buf.subarray(0, max - size));
      size = max;
      stop();
      body.destroy();
      resolve({ bytes: Buffer.concat(chunks, size), truncated: true });
    };
    const onEnd = () => {
      stop();
      resolve({ bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size), truncated: false });
    };
    const onError = (error: Error) => {
      stop();
      reject(error);
    };
    const onClose = () => onError(Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    body.on('data', onData);
    body.once('end', onEnd);
    body.once('close', onClose);
    body.once('error', onError);
  });
}

/** A client of its own (one keep-alive pool), guarded like every provider call (PROVIDER_URL_ALLOW). */
export function createModelListClient(options: { connectTimeoutMs: number; guard?: EgressGuard; httpVersion?: ProviderHttpVersion }): ModelListClient & { close(): Promise<void> } {
  const agent = new Agent({ keepAliveTimeout: 10_000, ...providerConnectOptions(options) });
  return {
    getJson: (url, headers, timeoutMs) => getProviderJson(agent, url, headers, { timeoutMs, guard: options.guard }),
    close: () => agent.close(),
  };
}

/**
 * A failed sync. `message` is what API answers and `last_sync_error` show: generic on purpose, so
 * that an admin-entered URL cannot be used to probe which internal hosts and ports answer and how.
 * `detail` (status codes, network errors) is for the service log only.
 */
export class SyncError extends Error {
  constructor(
    message: string,
    readonly detail: string = message,
    /** The URL is not an allowed destination: the admin's configuration, not the provider, is at fault. */
    readonly refused = false,
  ) {
    super(message);
    this.name = 'SyncError';
  }
}

/** The most pages of one model list followed (`has_more`); a longer list fails the sync. */
export const MAX_MODEL_LIST_PAGES = 50;

/**
 * Every entry of a provider's model list, or why there is none. OpenAI's list is one page; a
 * provider that pages it (`has_more: true`, as Anthropic's does) is followed with the last entry's
 * id as the cursor, `after_id` when the page names its `last_id` (Anthropic) and `after` otherwise,
 * because a sync that saw only the first page would deactivate every model on the others. A list
 * that cannot be read whole (a page that fails, a cursor that does not move, more than
 * MAX_MODEL_LIST_PAGES pages or MAX_UPSTREAM_MODELS entries) fails the sync: nothing is
 * deactivated on a partial list.
 */
async function listAllPages(deps: { upstream: ModelListClient; modelsTimeoutMs: number }, headers: Record<string, string>, url: string): Promise<unknown[] | string> {
  const entries: unknown[] = [];
  const cursors = new Set<string>();
  let next = url;
  for (let page = 1; ; page++) {
    const res = await deps.upstream.getJson(next, headers, deps.modelsTimeoutMs);
    if (res.status !== 200) return `GET /models answered ${res.status}${page > 1 ? ` on page ${page}` : ''}`;
    const body = res.body as { data?: unknown; has_more?: unknown; last_id?: unknown };
    if (!Array.isArray(body?.data)) return 'GET /models did not return {data: [...]}';
    if (entries.length + body.data.length > MAX_UPSTREAM_MODELS) return `GET /models listed more than ${MAX_UPSTREAM_MODELS} entries; at most ${MAX_UPSTREAM_MODELS} are synchronised`;
    for (const entry of body.data) entries.push(entry);
    if (body.has_more !== true) return entries;
    const lastEntry = body.data.at(-1) as { id?: unknown } | undefined;
    const cursor = typeof body.last_id === 'string' ? body.last_id : typeof lastEntry?.id === 'string' ? lastEntry.id : null;
    if (cursor === null || cursors.has(cursor)) return `GET /models said has_more, but page ${page} gave no new cursor to go on from`;
    if (page >= MAX_MODEL_LIST_PAGES) return `GET /models has more than ${MAX_MODEL_LIST_PAGES} pages`;
    cursors.add(cursor);
    const paged = new URL(url);
    paged.searchParams.set(typeof body.last_id === 'string' ? 'after_id' : 'after', cursor);
    next = paged.toString();
  }
}

const SYNC_FAILED = "model sync failed: the provider's models endpoint could not be reached or did not answer with a model list";
const SYNC_REFUSED = 'model sync refused: the provider URL is not an allowed destination (PROVIDER_URL_ALLOW)';
const SYNC_NO_ENDPOINT = 'model sync failed: every endpoint of the provider is switched off (enabled: false), so nothing was sent; switch one on';
const SYNC_KEY_UNAVAILABLE =
  "model sync failed: the provider's stored API key cannot be decrypted (MASTER_KEY changed, or the stored value altered), so nothing was sent; set its api_key again";

export async function fetchUpstreamModels(
  deps: { upstream: ModelListClient; modelsTimeoutMs: number; apiKeyOf(row: ProviderRow): string | null },
  row: ProviderRow,
): Promise<{ models: UpstreamModel[]; skipped: SkippedModel[] }> {
  // Decrypted before any request, once: a stored key that does not open fails the sync closed
  // (never a keyless request) and says so, rather than as a failed GET that was never sent.
  let headers: Record<string, string>;
  try {
    headers = authHeaders(deps.apiKeyOf(row));
  } catch {
    throw new SyncError(SYNC_KEY_UNAVAILABLE, `the stored API key of provider ${row.id} does not decrypt with this MASTER_KEY; GET /models was not sent`);
  }
  const endpoints = endpointsOf(row).filter((e) => e.healthy !== false).sort((a, b) => a.priority - b.priority);
  // Not a provider that could not be reached: nothing was tried, and the admin's switch says why.
  if (endpoints.length === 0) throw new SyncError(SYNC_NO_ENDPOINT, `every endpoint of provider ${row.id} is switched off; GET /models was not sent`);
  let lastError = 'no endpoint';
  let refused = false;
  for (const endpoint of endpoints) {
    try {
      const listed = await listAllPages(deps, headers, joinUrl(endpoint.url, 'models'));
      if (typeof listed === 'string') {
        lastError = listed;
        continue;
      }
      const models: UpstreamModel[] = [];
      const skipped: SkippedModel[] = [];
      listed.forEach((entry: unknown, index) => {
        const checked = checkUpstreamEntry(entry, index);
        if (checked.skipped) skipped.push(checked.skipped);
        else models.push(checked.model);
      });
      return { models, skipped };
    } catch (error) {
      if (error instanceof EgressRefusedError || (error as { cause?: unknown }).cause instanceof EgressRefusedError) refused = true;
      lastError = `GET /models failed: ${(error as Error).message}`;
    }
  }
  throw new SyncError(refused ? SYNC_REFUSED : SYNC_FAILED, lastError, refused);
}

