import type { Router } from 'express';
import { ApiError, isId, listEnvelope, parseInput, parsePage, principalOf, requireAdmin } from '../../../kit/index.js';
import { adminPatchUserRequest, adminUsersQuery } from '../schemas.js';
import type { UserAdmin } from './domain.js';

/** /v1/admin/users: list, read, and set is_admin / disabled. */
export function mountAdminUserRoutes(router: Router, deps: { userAdmin: UserAdmin }) {
  const { userAdmin } = deps;
  const userId = (value: unknown) => {
    if (!isId('user', value)) throw new ApiError(404, 'User not found', { param: 'id' });
    return value;
  };

  router.get('/v1/admin/users', requireAdmin, async (req, res) => {
    const page = parsePage(req.query);
    const q = parseInput(adminUsersQuery, { email: req.query.email, is_guest: req.query.is_guest, is_admin: req.query.is_admin, disabled: req.query.disabled });
    const { rows, total } = await userAdmin.list(page, { email: q.email, isGuest: q.is_guest, isAdmin: q.is_admin, disabled: q.disabled });
    res.json(listEnvelope(rows, total, page));
  });

  router.get('/v1/admin/users/:id', requireAdmin, async (req, res) => {
    res.json(await userAdmin.get(userId(req.params.id)));
  });

  router.patch('/v1/admin/users/:id', requireAdmin, async (req, res) => {
    const input = parseInput(adminPatchUserRequest, req.body);
    res.json(await userAdmin.patch(principalOf(req).userId, userId(req.params.id), input));
  });
}
