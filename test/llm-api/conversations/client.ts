import type { Knex } from 'knex';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';

/** A small JSON client for service-level tests: calls llm-api as the edge would for `user`. */
export interface Reply {
  status: number;
  body: any;
}

export function clientFor(base: string, gatewaySecret: string, user: TestUser) {
  const headers = { ...edgeHeaders(gatewaySecret, user), 'content-type': 'application/json' };
  async function call(method: string, path: string, body?: unknown): Promise<Reply> {
    const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  }
  return {
    user,
    call,
    get: (path: string) => call('GET', path),
    post: (path: string, body?: unknown) => call('POST', path, body ?? {}),
    patch: (path: string, body: unknown) => call('PATCH', path, body),
    del: (path: string) => call('DELETE', path),
  };
}

export type Client = ReturnType<typeof clientFor>;

/** llm-api for one test file, with one user and a client acting as them (`svc.close()` after). */
export async function startWithUser() {
  const svc = await startTestService(llmApiService);
  return { svc, alice: clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex)) };
}

/** As `startWithUser`, with a second user (`bob`) for the ownership checks. */
export async function startWithTwoUsers() {
  const { svc, alice } = await startWithUser();
  return { svc, alice, bob: clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex)) };
}

/** Outbox rows of `type` (optionally for one conversation), oldest first. */
export async function eventsOf(knex: Knex, type: string, conversationId?: string): Promise<Record<string, any>[]> {
  const query = knex('outbox_events').where({ type }).orderBy('seq', 'asc').select('data');
  if (conversationId) query.whereRaw("data->>'conversation_id' = ?", [conversationId]);
  return (await query).map((r: { data: Record<string, any> }) => r.data);
}

export const text = (t: string) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text: t }] });

/** A 400 in shape A naming `param`, without a stack trace. */
export function assertBadRequest(t: import('ava').ExecutionContext, r: { status: number; body: any }, param: string) {
  t.is(r.status, 400, JSON.stringify(r.body));
  t.is(r.body.error.type, 'invalid_request_error');
  t.is(r.body.error.code, 'invalid_parameter');
  t.is(r.body.error.param, param);
  t.false(JSON.stringify(r.body).includes('    at '), 'no stack trace');
}
