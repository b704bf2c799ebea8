import type { Router } from 'express';
import { ApiError, parseInput, principalOf } from '../../kit/index.js';
import type { Auth } from './auth.js';
import { refreshRequest, upgradeRequest } from './schemas.js';
import type { TokenIssuer } from './tokens/issuer.js';

/** Guest login, refresh, upgrade, the caller's profile, and the embedded issuer's JWKS/discovery. */
export function mountAuthRoutes(router: Router, deps: { auth: Auth; issuer: TokenIssuer | null; guestEmailDomain: string }) {
  const { auth, issuer } = deps;

  router.post('/auth/guest-login', async (_req, res) => {
    res.status(201).json(await auth.guestLogin());
  });

  for (const path of ['/auth/refresh', '/auth/refresh-token']) {
    router.post(path, async (req, res) => {
      const input = parseInput(refreshRequest, req.body);
      res.json(await auth.refresh(input.refresh_token));
    });
  }

  router.post('/auth/upgrade', async (req, res) => {
    const principal = principalOf(req);
    const input = parseInput(upgradeRequest, req.body);
    if (input.email.toLowerCase().endsWith(`@${deps.guestEmailDomain.toLowerCase()}`)) {
      throw new ApiError(400, 'A temporary guest e-mail cannot be used for an account', { param: 'email' });
    }
    if (principal.authMethod !== 'jwt') throw new ApiError(403, 'Upgrade needs the guest bearer token', { param: 'Authorization' });
    res.json(await auth.upgrade(principal.userId, { email: input.email, username: input.username, fullName: input.full_name }));
  });

  router.get('/auth/me', async (req, res) => {
    res.json(await auth.me(principalOf(req).userId));
  });

  if (issuer) {
    router.get('/.well-known/jwks.json', async (_req, res) => {
      res.set('cache-control', 'public, max-age=300').json(await issuer.jwks());
    });
    router.get('/.well-known/openid-configuration', (_req, res) => {
      res.set('cache-control', 'public, max-age=300').json(issuer.discovery());
    });
  }
}
