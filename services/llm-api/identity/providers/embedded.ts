import type { Knex } from 'knex';
import { ApiError } from '../../../kit/index.js';
import type { IdentityUsersStore, UserRecord } from '../store.js';
import type { TokenIssuer } from '../tokens/issuer.js';
import type { RefreshTokens } from '../tokens/refresh-tokens.js';
import type { IdentityProvider, TokenSet } from './types.js';

/** The platform issuer: users live only in the users table; `sub` of every token is the user id. */
export const EMBEDDED_ISSUER = 'platform';

export function createEmbeddedProvider(deps: { issuer: TokenIssuer; refreshTokens: RefreshTokens; users: IdentityUsersStore }): IdentityProvider {
  const { issuer, refreshTokens, users } = deps;

  async function tokensFor(user: UserRecord, refresh: { token: string; expiresIn: number }): Promise<TokenSet> {
    const access = await issuer.sign(user);
    return {
      access_token: access.token,
      refresh_token: refresh.token,
      token_type: 'Bearer',
      expires_in: access.expiresIn,
      refresh_expires_in: refresh.expiresIn,
    };
  }

  return {
    kind: 'embedded',
    passwordSignIn: true,
    async createGuest(profile) {
      return {
        issuer: EMBEDDED_ISSUER,
        subject: profile.userId,
        tokens: async (trx: Knex, user: UserRecord) => tokensFor(user, await refreshTokens.start(trx, user.id)),
        // Nothing exists outside the users table until `tokens` runs.
        discard: async () => {},
      };
    },
    async refresh(refreshToken) {
      const { userId, next } = await refreshTokens.rotate(refreshToken, async (trx, id) => {
        const user = await users.byId(id, trx);
        return user !== undefined && !user.disabled;
      });
      const user = await users.byId(userId);
      if (!user || user.disabled) throw new ApiError(401, 'Invalid or expired refresh token', { param: 'refresh_token' });
      return { userId, tokens: await tokensFor(user, next) };
    },
    revokeRefresh: (refreshToken) => refreshTokens.revoke(refreshToken),
    async startSession(user, stillValid) {
      const refresh = await refreshTokens.startIf(user.id, stillValid);
      if (!refresh) throw new ApiError(401, 'Invalid e-mail or password', { code: 'invalid_credentials' });
      // After the transaction: signing may read the key table (PGlite has a single connection).
      return tokensFor(user, refresh);
    },
    async upgrade() {},
    mirrorsApiKeys: false,
    async apiKeyAdded() {},
    async apiKeyRemoved() {},
    async setEnabled() {},
    // The users table is the only record: its `disabled` is checked by the validation itself.
    standing: () => 'active',
  };
}
