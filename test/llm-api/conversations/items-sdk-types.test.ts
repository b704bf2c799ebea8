import test from 'ava';
import type { ResponseInputItem } from 'openai/resources/responses/responses';
import type { TestService } from '../../helpers/env.js';
import { assertBadRequest, startWithUser, text, type Client } from './client.js';

// Items exactly as the openai SDK types the `items` of conversations.create / items.create
// (ResponseInputItem): its optional fields may be null, and a computer call's output is an object.
let svc: TestService;
let alice: Client;

test.before(async () => ({ svc, alice } = await startWithUser()));
test.after.always(() => svc?.close());

const sdkItems: ResponseInputItem[] = [
  { type: 'function_call_output', call_id: 'call_1', output: '4', id: null, status: null },
  { type: 'computer_call_output', call_id: 'call_2', output: { type: 'computer_screenshot', image_url: 'https://example.com/shot.png' }, acknowledged_safety_checks: null, status: null },
  { type: 'computer_call_output', call_id: 'call_3', output: { type: 'computer_screenshot', file_id: 'file_1' }, acknowledged_safety_checks: [{ id: 'sc_1', code: null, message: null }] },
  { type: 'mcp_call', id: 'mcp_1', server_label: 'docs', name: 'search', arguments: '{}', output: null, error: null, approval_request_id: null },
  { type: 'mcp_approval_response', approval_request_id: 'mcpr_1', approve: false, reason: null, id: null },
  { type: 'mcp_list_tools', id: 'mcpl_1', server_label: 'docs', tools: [{ name: 'search', input_schema: {}, description: null, annotations: null }], error: null },
  { type: 'apply_patch_call_output', call_id: 'call_4', status: 'completed', output: null },
  { type: 'shell_call_output', call_id: 'call_5', output: [], max_output_length: null, status: null },
  { type: 'local_shell_call_output', id: 'lsh_1', output: 'done', status: null },
  { type: 'tool_search_call', arguments: { query: 'weather' }, call_id: null, status: null },
  { type: 'tool_search_output', tools: [{ type: 'web_search' }], call_id: null, status: 'completed' },
  { type: 'additional_tools', role: 'developer', tools: [{ type: 'function', name: 'lookup', parameters: {}, strict: null }], id: null },
  { type: 'compaction', encrypted_content: 'opaque', id: null },
];

test('items typed as the openai SDK types them (null optional fields, a screenshot output, tool search and compaction items) are stored as given', async (t) => {
  const c = await alice.post('/v1/conversations', { items: sdkItems.slice(0, 6) });
  t.is(c.status, 200, JSON.stringify(c.body));
  const more = await alice.post(`/v1/conversations/${c.body.id}/items`, { items: sdkItems.slice(6) });
  t.is(more.status, 200, JSON.stringify(more.body));
  const listed = await alice.get(`/v1/conversations/${c.body.id}/items?order=asc&limit=100`);
  t.is(listed.body.data.length, sdkItems.length);
  listed.body.data.forEach((stored: any, i: number) => {
    const { id: _id, status, ...given } = sdkItems[i] as unknown as Record<string, unknown>;
    t.like(stored, given, `item ${i} (${String(given.type)})`);
    // A null (or absent) status is the default one; a given status is kept.
    t.is(stored.status, typeof status === 'string' ? status : 'completed', `status of item ${i}`);
  });
});

test('what the SDK requires is still required, and a wrong type is still a 400 naming the field', async (t) => {
  const c = await alice.post('/v1/conversations', {});
  const id = c.body.id;
  const bad: Array<[unknown, string]> = [
    [{ type: 'function_call_output', call_id: 'c', output: null }, 'items[1].output'],
    [{ type: 'function_call_output', call_id: 'c', output: { type: 'computer_screenshot' } }, 'items[1].output'],
    [{ type: 'computer_call_output', call_id: 'c', output: 5 }, 'items[1].output'],
    [{ type: 'mcp_call', server_label: 's', name: 'n', arguments: '{}', status: 5 }, 'items[1].status'],
    [{ type: 'mcp_approval_response', approval_request_id: 'a', approve: true, reason: 5 }, 'items[1].reason'],
    [{ type: 'tool_search_call', call_id: 'c' }, 'items[1].arguments'],
    [{ type: 'tool_search_output', call_id: 'c' }, 'items[1].tools'],
    [{ type: 'additional_tools', role: 'developer' }, 'items[1].tools'],
    [{ type: 'additional_tools', role: 'user', tools: [] }, 'items[1].role'],
    [{ type: 'compaction', id: 'x' }, 'items[1].encrypted_content'],
    [{ type: 'program_output' }, 'items[1].content'],
  ];
  for (const [item, param] of bad) assertBadRequest(t, await alice.post(`/v1/conversations/${id}/items`, { items: [text('ok'), item] }), param);
  t.is((await alice.get(`/v1/conversations/${id}/items`)).body.data.length, 0, 'a refused request stores none of its items');
});
