import { randomUUID } from 'node:crypto';
import { createLocalJWKSet, jwtVerify, SignJWT, type JWTPayload } from 'jose';
import type { Clock } from '../../../kit/index.js';
import type { KeyRing } from './signing-keys.js';

/** Claims of an access token of the embedded issuer. `sub` is the platform user id (`user_…`). */
export interface AccessClaims extends JWTPayload {
  sub: string;
  email?: string;
  preferred_username?: string;
  guest: boolean;
  email_verified?: boolean;
}

export interface TokenSubject {
  id: string;
  email: string | null;
  username: string | null;
  is_guest: boolean;
  /** Carried as the OIDC `email_verified` claim: the edge gives unverified accounts a lower tier. */
  email_verified?: boolean;
}

export interface IssuerSettings {
  issuer: string;
  audience: string;
  accessTtlSeconds: number;
  guestAccessTtlSeconds: number;
}

export function createTokenIssuer(options: { keys: KeyRing; clock: Clock; settings: IssuerSettings }) {
  const { keys, clock, settings } = options;
  return {
    settings,
    ttlFor(user: Pick<TokenSubject, 'is_guest'>): number {
      return user.is_guest ? settings.guestAccessTtlSeconds : settings.accessTtlSeconds;
    },

    async sign(user: TokenSubject): Promise<{ token: string; expiresIn: number }> {
      const key = await keys.signingKey();
      const now = Math.floor(clock.now() / 1000);
      const ttl = this.ttlFor(user);
      const claims: Record<string, unknown> = { guest: user.is_guest, email_verified: user.email_verified === true };
      if (user.email) claims.email = user.email;
      if (user.username) claims.preferred_username = user.username;
      const token = await new SignJWT(claims)
        .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
        .setIssuer(settings.issuer)
        .setSubject(user.id)
        .setAudience(settings.audience)
        .setIssuedAt(now)
        .setNotBefore(now)
        .setExpirationTime(now + ttl)
        .setJti(randomUUID())
        .sign(key.privateKey);
      return { token, expiresIn: ttl };
    },

    /** Verifies a token as the edge does (issuer, audience, exp, nbf, published keys) at the clock's time. */
    async verify(token: string): Promise<AccessClaims> {
      const jwks = createLocalJWKSet({ keys: await keys.publicKeys() });
      const { payload } = await jwtVerify(token, jwks, {
        issuer: settings.issuer,
        audience: settings.audience,
        algorithms: ['ES256', 'RS256'],
        currentDate: new Date(clock.now()),
        requiredClaims: ['exp', 'nbf', 'iat', 'sub', 'jti'],
      });
      return payload as AccessClaims;
    },

    async jwks(): Promise<{ keys: unknown[] }> {
      return { keys: await keys.publicKeys() };
    },

    /** OpenID Provider metadata (the parts that apply to this issuer). */
    discovery(): Record<string, unknown> {
      const base = settings.issuer.replace(/\/$/, '');
      return {
        issuer: settings.issuer,
        jwks_uri: `${base}/.well-known/jwks.json`,
        token_endpoint: `${base}/llm/auth/refresh`,
        response_types_supported: ['token'],
        subject_types_supported: ['public'],
        id_token_signing_alg_values_supported: ['ES256', 'RS256'],
        token_endpoint_auth_methods_supported: ['none'],
        grant_types_supported: ['refresh_token'],
        claims_supported: ['iss', 'sub', 'aud', 'exp', 'nbf', 'iat', 'jti', 'email', 'preferred_username', 'guest'],
      };
    },
  };
}

export type TokenIssuer = ReturnType<typeof createTokenIssuer>;
