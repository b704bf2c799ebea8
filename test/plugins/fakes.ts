import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';
import { randomBase62, sha256Hex } from '../../services/kit/secrets.js';

/**
 * Real HTTP servers on 127.0.0.1 standing in for the identity provider (JWKS), llm-api's key
 * validator and an upstream service, so plugin and gateway tests do not depend on llm-api.
 */
export async function listenOn(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const server = createServer(handler);
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const ISSUER = 'https://issuer.test';
export const AUDIENCE = 'ai-gateway';

interface SigningKey {
  kid: string;
  alg: string;
  privateKey: Parameters<SignJWT['sign']>[0];
  jwk: JWK;
}

export async function newSigningKey(alg: 'ES256' | 'RS256' = 'ES256', kid = `k_${randomBase62(8)}`): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, jwk };
}

/** A JWKS endpoint whose key set the test changes (rotation), counting fetches; `down` answers 503. */
export async function startFakeIssuer() {
  const keys: SigningKey[] = [await newSigningKey('ES256'), await newSigningKey('RS256')];
  let published = keys.map((k) => k.jwk);
  let fetches = 0;
  let down = false;
  const http = await listenOn((_req, res) => {
    fetches++;
    if (down) {
      res.writeHead(503).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: published }));
  });
  return {
    url: `${http.url}/.well-known/jwks.json`,
    keys,
    get fetches() {
      return fetches;
    },
    setDown(value: boolean) {
      down = value;
    },
    /** Publishes these keys (a rotation). */
    publish(set: SigningKey[]) {
      published = set.map((k) => k.jwk);
    },
    async sign(
      claims: Record<string, unknown>,
      options: { key?: SigningKey; iat?: number; nbf?: number; exp?: number | null; iss?: string; aud?: string; sub?: string } = {},
    ): Promise<string> {
      const key = options.key ?? keys[0]!;
      const now = Math.floor(Date.now() / 1000);
      const iat = options.iat ?? now;
      const payload: Record<string, unknown> = { email: 'ada@example.test', preferred_username: 'ada', ...claims };
      const jwt = new SignJWT(payload)
        .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
        .setIssuer(options.iss ?? ISSUER)
        .setAudience(options.aud ?? AUDIENCE)
        .setSubject(options.sub ?? 'user_ada')
        .setIssuedAt(iat)
        .setNotBefore(options.nbf ?? iat);
      if (options.exp !== null) jwt.setExpirationTime(options.exp ?? iat + 300);
      return jwt.sign(key.privateKey);
    },
    close: () => http.close(),
  };
}

/** `alg: none` token (unsigned) with the given claims. */
export function unsignedToken(claims: Record<string, unknown>): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`;
}

export interface FakeKey {
  key: string;
  hash: string;
  userId: string;
  tier: string;
  limits: Record<string, number | null> | null;
  /** Unix seconds, as llm-api's validator reports it; null = never. */
  expiresAt: number | null;
  /** The id the owner's tokens carry (llm-api's users.subject); the user id unless given (an external issuer's user). */
  subject: string;
  /** The key's id (`key_…`) the validator reports as `key_id`; set it to null for an answer without one. */
  keyId: string | null;
}

/** llm-api's `POST /internal/auth/validate-api-key` stand-in: checks the gateway token, counts calls. */
export async function startFakeValidator(gatewayToken: string) {
  const keys = new Map<string, FakeKey>();
  let calls = 0;
  let mode: 'normal' | 'error' | 'hang' = 'normal';
  const http = await listenOn((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      calls++;
      if (mode === 'hang') return; // never answers
      if (mode === 'error') return void res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{}}');
      // What llm-api's gateway-token check answers (kit requireGatewayToken), not a verdict on the key.
      if (req.headers['x-gateway-token'] !== gatewayToken) {
        return void res
          .writeHead(401, { 'content-type': 'application/json' })
          .end('{"error":{"message":"Requests must come through the gateway","type":"auth_error","param":"X-Gateway-Token","code":"unauthorized"}}');
      }
      const body = JSON.parse(raw || '{}') as { api_key?: string };
      const found = body.api_key ? keys.get(body.api_key) : undefined;
      if (!found) return void res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"type":"auth_error"}}');
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({ user_id: found.userId, subject: found.subject, email: `${found.userId}@example.test`, username: found.userId, is_admin: false, tier: found.tier, limits: found.limits, key_id: found.keyId, expires_at: found.expiresAt }),
      );
    });
  });
  return {
    url: `${http.url}/internal/auth/validate-api-key`,
    get calls() {
      return calls;
    },
    setMode(value: 'normal' | 'error' | 'hang') {
      mode = value;
    },
    add(userId: string, tier = 'free', limits: Record<string, number | null> | null = null, subject = userId): FakeKey {
      const key = `sk_${randomBase62(32)}`;
      const entry: FakeKey = { key, hash: sha256Hex(key), userId, tier, limits, expiresAt: null, subject, keyId: `key_${randomBase62(24)}` };
      keys.set(key, entry);
      return entry;
    },
    setExpiry(key: string, expiresAt: number | null) {
      keys.get(key)!.expiresAt = expiresAt;
    },
    remove(key: string) {
      keys.delete(key);
    },
    close: () => http.close(),
  };
}

/** An upstream that echoes what reached it, and streams SSE on /v1/stream (one chunk per `next()`). */
export async function startFakeUpstream() {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }> = [];
  const streams: Array<{ write(chunk: string): void; end(): void }> = [];
  const waiters: Array<() => void> = [];
  const chunkWaiters: Array<(chunk: string) => void> = [];
  const http = await listenOn((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
      chunkWaiters.splice(0).forEach((w) => w(String(c)));
    });
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      if (req.url?.startsWith('/v1/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.flushHeaders();
        streams.push({ write: (chunk) => res.write(chunk), end: () => res.end() });
        waiters.splice(0).forEach((w) => w());
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' }).end(
        JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }),
      );
    });
  });
  return {
    url: http.url,
    seen,
    /** Resolves with the next request-body chunk any request delivers to the upstream. */
    nextBodyChunk: () => new Promise<string>((resolve) => chunkWaiters.push(resolve)),
    /** The next SSE stream opened by a client (resolves once the upstream has it). */
    async nextStream() {
      if (streams.length === 0) await new Promise<void>((resolve) => waiters.push(resolve));
      return streams.shift()!;
    },
    close: () => http.close(),
  };
}

/** Kong's own consumer headers as a client would forge them (Kong passes them on to our plugins' upstreams). */
export const KONG_SPOOF = {
  'X-Consumer-ID': 'c0ffee00-0000-4000-8000-000000000001',
  'X-Consumer-Custom-ID': 'admin',
  'X-Consumer-Username': 'admin',
  'X-Consumer-Groups': 'admins',
  'X-Credential-Identifier': 'admin-key',
  'X-Anonymous-Consumer': 'false',
  'X-Authenticated-Groups': 'admins',
  'X-Authenticated-Scope': 'admin',
  'X-Authenticated-Userid': 'admin',
};
