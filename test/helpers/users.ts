import type { Knex } from 'knex';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, newId } from '../../services/kit/index.js';

export interface TestUser {
  id: string;
  email: string;
  username: string;
  is_admin: boolean;
}

/** Inserts a platform user directly (for service-level tests that bypass the identity issue's endpoints). */
export async function createTestUser(knex: Knex, options: { admin?: boolean; guest?: boolean } = {}): Promise<TestUser> {
  const id = newId('user');
  const username = `u_${id.slice(-8).toLowerCase()}`;
  const email = `${username}@example.test`;
  await knex('users').insert({ id, subject: id, email, username, is_admin: options.admin ?? false, is_guest: options.guest ?? false });
  return { id, email, username, is_admin: options.admin ?? false };
}

/** The headers the edge would set for `user`, plus the gateway token: a service-level caller. */
export function edgeHeaders(gatewaySecret: string, user?: TestUser, method: 'jwt' | 'apikey' = 'jwt'): Record<string, string> {
  const headers: Record<string, string> = { [GATEWAY_TOKEN_HEADER]: gatewaySecret };
  if (user) {
    headers[IDENTITY_HEADERS.authMethod] = method;
    headers[IDENTITY_HEADERS.userId] = user.id;
    headers[IDENTITY_HEADERS.subject] = user.id;
    headers[IDENTITY_HEADERS.email] = user.email;
    headers[IDENTITY_HEADERS.username] = user.username;
  }
  return headers;
}
