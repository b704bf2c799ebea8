import type { Router } from 'express';
import { ApiError, isId, listEnvelope, parseInput, parsePage, principalOf, requireAdmin } from '../../../kit/index.js';
import { adminCreateKeyRequest, adminKeysQuery, adminPatchKeyRequest, createKeyRequest, validateKeyRequest } from '../schemas.js';
import type { ApiKeys, NewKeyInput } from './domain.js';

/**
 * /auth/api-keys (the caller's keys; bearer JWT only), /auth/validate-api-key (the edge), and
 * /v1/admin/api-keys (keys of any user, any tier, custom limits).
 */
export function mountApiKeyRoutes(router: Router, deps: { apiKeys: ApiKeys; maxTtlDays: number }) {
  const { apiKeys } = deps;
  const createSchema = createKeyRequest(deps.maxTtlDays);
  const adminCreateSchema = adminCreateKeyRequest(deps.maxTtlDays);

  const bearerOnly = (req: Parameters<typeof principalOf>[0]) => {
    const principal = principalOf(req);
    if (principal.authMethod !== 'jwt') {
      throw new ApiError(403, 'API keys are managed with a bearer token, not with an API key', { param: 'Authorization' });
    }
    return principal;
  };
  const keyId = (value: unknown) => {
    if (!isId('apiKey', value)) throw new ApiError(404, 'API key not found', { param: 'id' });
    return value;
  };

  router.post('/auth/api-keys', async (req, res) => {
    const principal = bearerOnly(req);
    const input = parseInput(createSchema, req.body);
    if (principal.isGuest) throw new ApiError(403, 'Guest accounts cannot create API keys; upgrade the account first');
    if (!principal.isAdmin && input.tier !== undefined && input.tier !== 'free') {
      throw new ApiError(403, 'Only an administrator may create pro or enterprise keys', { param: 'tier' });
    }
    if (!principal.isAdmin && input.limits != null) {
      throw new ApiError(403, 'Only an administrator may set custom limits', { param: 'limits' });
    }
    const created = await apiKeys.create(principal.userId, createOptions(input));
    res.status(201).json(created);
  });

  router.get('/auth/api-keys', async (req, res) => {
    const data = await apiKeys.list(bearerOnly(req).userId);
    res.json({ object: 'list', data, has_more: false, total_count: data.length });
  });

  router.delete('/auth/api-keys/:id', async (req, res) => {
    const principal = bearerOnly(req);
    res.json(await apiKeys.remove(keyId(req.params.id), principal.userId));
  });

  router.post('/auth/validate-api-key', async (req, res) => {
    const header = req.headers['x-api-key'];
    const body = req.body === undefined && typeof header === 'string' ? { api_key: header } : req.body;
    const input = parseInput(validateKeyRequest, body);
    res.set('cache-control', 'no-store').json(await apiKeys.validate(input.api_key));
  });

  router.post('/v1/admin/api-keys', requireAdmin, async (req, res) => {
    const input = parseInput(adminCreateSchema, req.body);
    const created = await apiKeys.create(input.user_id, createOptions(input));
    res.status(201).json(created);
  });

  router.get('/v1/admin/api-keys', requireAdmin, async (req, res) => {
    const page = parsePage(req.query);
    const { user_id: userId } = parseInput(adminKeysQuery, { user_id: req.query.user_id });
    const { rows, total } = await apiKeys.listPage(userId, page);
    res.json(listEnvelope(rows, total, page));
  });

  router.patch('/v1/admin/api-keys/:id', requireAdmin, async (req, res) => {
    const input = parseInput(adminPatchKeyRequest, req.body);
    res.json(await apiKeys.update(keyId(req.params.id), { tier: input.tier, limits: input.limits }));
  });
}

/** The request's key fields as the domain takes them (user and admin creation alike). */
function createOptions(input: Omit<NewKeyInput, 'expiresInDays'> & { expires_in_days?: number }): NewKeyInput {
  return { name: input.name, tier: input.tier, limits: input.limits, expiresInDays: input.expires_in_days };
}
