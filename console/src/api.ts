/**
 * Every call goes to this origin's public API with the signed-in user's credential: an API key
 * (sent as X-API-Key) or the token pair of an e-mail and password sign-in (the access token sent as
 * `Authorization: Bearer`, renewed with the refresh token when the API answers 401). It lives in
 * memory and in sessionStorage (this tab only, gone when it closes): never in localStorage, a
 * cookie or a URL.
 */
export type Credential = { kind: 'api_key'; key: string } | { kind: 'token'; access: string; refresh: string };
const STORAGE_KEY = 'console.credential';

function stored(): Credential | null {
  try {
    const value = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? 'null') as Credential | null;
    return value && (value.kind === 'api_key' || value.kind === 'token') ? value : null;
  } catch {
    return null;
  }
}
let current: Credential | null = stored();

export function credential(): Credential | null {
  return current;
}
export function setCredential(value: Credential) {
  current = value;
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify(value));
}
export function clearCredential() {
  current = null;
  sessionStorage.removeItem(STORAGE_KEY);
}

/**
 * Sign-out: the credential is forgotten at once, and a token sign-in's session is ended at the API
 * (`POST /llm/auth/logout`), so its refresh token, wherever a copy of it went, renews nothing.
 * An API key stays valid: it is revoked on the keys page, not by signing out.
 */
export function signOutCredential(): Promise<void> {
  const held = current;
  clearCredential();
  if (held?.kind !== 'token') return Promise.resolve();
  return fetch('/llm/auth/logout', {
    method: 'POST',
    headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
    body: JSON.stringify({ refresh_token: held.refresh }),
    credentials: 'omit',
    cache: 'no-store',
    keepalive: true,
  }).then(
    () => {},
    () => {},
  );
}

/** An API error as the platform answers it: `{"error":{"type","code","message","param","request_id"}}`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null,
    readonly param: string | null,
    readonly requestId: string | null,
    /** Seconds to wait before trying again, from a 429's or 503's `Retry-After` (null when not given). */
    readonly retryAfter: number | null = null,
  ) {
    super(message);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { Accept: 'application/json', ...extra };
  if (current?.kind === 'api_key') h['X-API-Key'] = current.key;
  if (current?.kind === 'token') h.Authorization = `Bearer ${current.access}`;
  return h;
}

/** The answer of sign-in, guest login and refresh. */
export interface TokenPair {
  access_token: string;
  refresh_token: string;
}

/** E-mail and password sign-in: a token pair, or the API's error (401, 429 locked, 400 …). */
export async function signInWithPassword(email: string, password: string): Promise<TokenPair> {
  const res = await reach('/llm/auth/login', {
    method: 'POST',
    headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
    body: JSON.stringify({ email, password }),
    credentials: 'omit',
    cache: 'no-store',
  });
  if (!res.ok) throw await toError(res);
  return (await res.json()) as TokenPair;
}

/**
 * What a token renewal came to: `renewed` (a new pair is held), `refused` (the API refused the
 * refresh token itself, 400 or 401: the session is over) or `unavailable` (the API could not be
 * reached, answered 5xx, 429 or anything else: the session may well be alive, so the credential is
 * kept and `error` says why it could not be renewed now).
 */
type Renewal = { outcome: 'renewed' } | { outcome: 'refused' } | { outcome: 'unavailable'; error: Error };

const NOT_RENEWED = 'Your session could not be renewed right now (you are still signed in in this tab)';

let renewing: Promise<Renewal> | null = null;
/** Exchanges the refresh token once for every call that met the expired access token at the same time. */
function renewToken(): Promise<Renewal> {
  const held = current;
  if (held?.kind !== 'token') return Promise.resolve({ outcome: 'refused' });
  renewing ??= (async (): Promise<Renewal> => {
    try {
      const res = await reach('/llm/auth/refresh', {
        method: 'POST',
        headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
        body: JSON.stringify({ refresh_token: held.refresh }),
        credentials: 'omit',
        cache: 'no-store',
      });
      if (res.status === 400 || res.status === 401) return { outcome: 'refused' };
      if (!res.ok) {
        const e = await toError(res);
        return { outcome: 'unavailable', error: new ApiError(e.status, `${NOT_RENEWED}: ${e.message}`, e.code, e.param, e.requestId, e.retryAfter) };
      }
      const pair = (await res.json()) as Partial<TokenPair>;
      if (typeof pair?.access_token !== 'string' || typeof pair.refresh_token !== 'string') throw new Error('The API answered the renewal without a token pair.');
      if (current === held) setCredential({ kind: 'token', access: pair.access_token, refresh: pair.refresh_token });
      return { outcome: 'renewed' };
    } catch (error) {
      return { outcome: 'unavailable', error: new Error(`${NOT_RENEWED}: ${error instanceof Error ? error.message : String(error)}`) };
    } finally {
      renewing = null;
    }
  })();
  return renewing;
}

// `.` and `..` segments, written plainly or percent-encoded: the browser resolves them away before
// sending (`/v1/admin/models/catalogs/../../providers/x` reaches `/v1/admin/providers/x`).
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/**
 * Refuses a path with a dot segment. Ids and names put in paths come from the API, and some from
 * providers (a model id of a provider's sync), which must not steer a call made with the signed-in
 * user's credential to another endpoint; `encodeURIComponent` leaves dots as they are.
 */
function refuseDotSegments(path: string): void {
  const [pathname = ''] = path.split(/[?#]/, 1);
  if (pathname.split('/').some((segment) => DOT_SEGMENT.test(segment))) {
    // Not an API answer: nothing was sent.
    throw new Error(`Refused before sending: the path ${pathname} has a "." or ".." segment (an id that cannot be used in a URL).`);
  }
}

/**
 * fetch, with an unreachable API (network down, connection refused) turned into an error that says
 * so rather than the browser's bare "Failed to fetch". An aborted call stays an AbortError.
 */
async function reach(path: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(path, init);
  } catch (error) {
    if (init.signal?.aborted || (error instanceof DOMException && error.name === 'AbortError')) throw error;
    throw new Error('The API could not be reached (network error or the server is down). Try again in a moment.');
  }
}

let credentialRefused: (() => void) | null = null;
/**
 * Registers what to do when the API refuses the signed-in credential itself (a 401 that a token
 * renewal could not cure: a key revoked, a session ended or expired). The call's error is still
 * thrown to its caller.
 */
export function onCredentialRefused(listener: () => void) {
  credentialRefused = listener;
}

let adminRefused: (() => void) | null = null;
/**
 * Registers what to do when the API answers 403 to an administrator endpoint (`/v1/admin/…`): the
 * signed-in user may have lost the administrator role since the console asked who they are. The
 * call's error is still thrown to its caller.
 */
export function onAdminRefused(listener: () => void) {
  adminRefused = listener;
}

/** fetch with the credential; a 401 with a token sign-in renews the access token and tries once more. */
async function authorizedFetch(path: string, init: RequestInit & { extraHeaders?: Record<string, string> }): Promise<Response> {
  refuseDotSegments(path);
  const send = async () => {
    const used = current;
    return { used, res: await reach(path, { ...init, headers: headers(init.extraHeaders), credentials: 'omit', cache: 'no-store' }) };
  };
  let { used, res } = await send();
  if (res.status === 401 && used?.kind === 'token') {
    const renewal = await renewToken();
    if (renewal.outcome === 'renewed') ({ used, res } = await send());
    // The refresh could not be tried (the API is down or busy): the session is not over, the
    // credential is kept, and the caller shows why the call could not be made now.
    else if (renewal.outcome === 'unavailable' && used === current) throw renewal.error;
  }
  // Only when the refused credential is still the one held (not one already replaced by a new sign-in).
  if (res.status === 401 && used !== null && used === current) credentialRefused?.();
  if (res.status === 403 && used !== null && used === current && path.startsWith('/v1/admin/')) adminRefused?.();
  return res;
}

// Reason phrases for answers that carry none (HTTP/2 has no status text) and no error of the API's own.
const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  413: 'Content Too Large',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

/**
 * The message of an answer without an error of the API's own (a proxy's HTML page, an empty body):
 * its status and reason phrase, and for a 502, 503 or 504 what that usually means. The body itself
 * is never shown: it may be a whole HTML page.
 */
function statusMessage(res: Response): string {
  const head = res.statusText.trim() || STATUS_TEXT[res.status] || `HTTP ${res.status}`;
  if (res.status === 502 || res.status === 503 || res.status === 504) {
    return `${head}. A proxy in front of the API, or the API itself, is unavailable. Try again in a moment.`;
  }
  return head;
}

async function toError(res: Response): Promise<ApiError> {
  const requestId = res.headers.get('x-request-id');
  let body: { error?: { message?: unknown; code?: unknown; param?: unknown; request_id?: unknown } } | null = null;
  try {
    body = await res.json();
  } catch {
    /* not JSON (a proxy's HTML page, an empty body): described by its status alone */
  }
  const e = body && typeof body === 'object' && body.error && typeof body.error === 'object' ? body.error : {};
  const text = (value: unknown) => (typeof value === 'string' && value ? value : null);
  const wait = Number(res.headers.get('retry-after') ?? NaN);
  return new ApiError(res.status, text(e.message) ?? statusMessage(res), text(e.code), text(e.param), text(e.request_id) ?? requestId, Number.isFinite(wait) && wait >= 0 ? Math.ceil(wait) : null);
}

export async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await authorizedFetch(path, {
    method,
    extraHeaders: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await toError(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

export const get = <T>(path: string) => request<T>('GET', path);
export const post = <T>(path: string, body: unknown = {}) => request<T>('POST', path, body);
export const patch = <T>(path: string, body: unknown) => request<T>('PATCH', path, body);
export const del = <T>(path: string) => request<T>('DELETE', path);

/** An offset-paginated list as the API answers it (`has_more` says whether another page follows). */
export interface PagedList<T> {
  object: 'list';
  data: T[];
  has_more?: boolean;
  total_count?: number;
}

/**
 * Every item of an offset-paginated list: asks page after page (`limit`, `offset`) while the API
 * answers `has_more`, up to `maxItems`. `truncated` says the bound stopped it before the end, so
 * the page can say that it shows only part of the list.
 */
export async function getAll<T>(path: string, options: { pageSize?: number; maxItems?: number } = {}): Promise<{ data: T[]; truncated: boolean; total: number }> {
  const pageSize = options.pageSize ?? 100;
  const maxItems = options.maxItems ?? 5000;
  const data: T[] = [];
  const separator = path.includes('?') ? '&' : '?';
  for (;;) {
    const page = await get<PagedList<T>>(`${path}${separator}limit=${pageSize}&offset=${data.length}`);
    data.push(...page.data);
    const total = page.total_count ?? data.length;
    if (!page.has_more || page.data.length === 0) return { data, truncated: false, total };
    if (data.length >= maxItems) return { data, truncated: true, total };
  }
}

/** A raw response (CSV export), errors turned into ApiError. */
export async function fetchText(path: string): Promise<string> {
  const res = await authorizedFetch(path, { extraHeaders: { Accept: 'text/csv' } });
  if (!res.ok) throw await toError(res);
  return res.text();
}

/** The conversation a `store: true` chat was written to (on the stream's first chunk with choices). */
export interface ConversationRef {
  id: string;
  title?: string | null;
}

/**
 * POST /v1/chat/completions with stream: true; calls `onDelta` with each piece of content as it
 * arrives (server-sent events, `data: {...}` lines, ended by `data: [DONE]`), and `onConversation`
 * once when a chunk names the conversation the exchange is stored in.
 */
export async function streamChat(body: Record<string, unknown>, onDelta: (text: string) => void, signal: AbortSignal, onConversation?: (ref: ConversationRef) => void): Promise<void> {
  const res = await authorizedFetch('/v1/chat/completions', {
    method: 'POST',
    extraHeaders: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!res.ok || !res.body) throw await toError(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        const parsed = JSON.parse(data) as { error?: { message?: string }; choices?: Array<{ delta?: { content?: string } }>; conversation?: ConversationRef };
        if (parsed.error) throw new ApiError(502, parsed.error.message ?? 'The stream failed', null, null, res.headers.get('x-request-id'));
        if (parsed.conversation?.id && onConversation) {
          onConversation(parsed.conversation);
          onConversation = undefined;
        }
        const text = parsed.choices?.[0]?.delta?.content;
        if (text) onDelta(text);
      }
    }
  }
}
