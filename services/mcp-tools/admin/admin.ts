import type { Knex } from 'knex';
import { ApiError, recordEvent, type Clock } from '../../kit/index.js';
import type { ToolCatalog } from '../tools/catalog.js';
import type { ToolSettingsStore } from './store.js';
import type { ToolSwitchboard } from './tool-switches.js';
import type { AdminTool } from './tool.js';

/**
 * Administration of the tools: list them with their state, switch one on or off. A change is
 * written with its event (`mcp_tool.enabled` / `mcp_tool.disabled`) in one transaction through
 * the outbox, so webhook subscribers hear of exactly the changes that committed. Setting a tool to
 * the state it already has changes nothing and emits nothing.
 */
export interface AdminDeps {
  knex: Knex;
  store: ToolSettingsStore;
  switches: ToolSwitchboard;
  catalog: ToolCatalog;
  clock: Clock;
}

export type { AdminTool } from './tool.js';

export function listTools(deps: Pick<AdminDeps, 'catalog' | 'switches'>): { object: 'list'; data: AdminTool[] } {
  return { object: 'list', data: deps.catalog.all.map((tool) => present(deps, tool.name)) };
}

export function getTool(deps: Pick<AdminDeps, 'catalog' | 'switches'>, name: string): AdminTool {
  if (!deps.catalog.get(name)) throw notFound(name);
  return present(deps, name);
}

export async function setToolEnabled(deps: AdminDeps, adminUserId: string, name: string, input: { enabled: boolean; reason?: string | null }): Promise<AdminTool> {
  if (!deps.catalog.get(name)) throw notFound(name);
  const changed = await deps.knex.transaction(async (trx) => {
    const current = await deps.store.lock(trx, name);
    const wasEnabled = current?.enabled ?? true;
    if (wasEnabled === input.enabled) return null;
    const now = new Date(deps.clock.now());
    const row = { name, enabled: input.enabled, reason: input.enabled ? null : input.reason ?? null, updated_by: adminUserId, updated_at: now };
    await deps.store.save(trx, row);
    const at = now.toISOString();
    if (input.enabled) await recordEvent(trx, 'mcp_tool.enabled', { tool_id: name, tool_name: name, enabled_at: at, enabled_by: adminUserId });
    else await recordEvent(trx, 'mcp_tool.disabled', { tool_id: name, tool_name: name, disabled_at: at, disabled_by: adminUserId, reason: row.reason });
    return row;
  });
  if (changed) deps.switches.apply(changed);
  return present(deps, name);
}

function present(deps: Pick<AdminDeps, 'catalog' | 'switches'>, name: string): AdminTool {
  const tool = deps.catalog.get(name)!;
  const state = deps.switches.state(name);
  const unavailable = tool.unavailableReason?.() ?? null;
  return {
    id: name,
    object: 'mcp_tool',
    name,
    title: tool.title,
    description: tool.description,
    enabled: state?.enabled ?? true,
    reason: state?.reason ?? null,
    available: unavailable === null,
    unavailable_reason: unavailable,
    updated_at: state?.updated_at ? new Date(state.updated_at).toISOString() : null,
    updated_by: state?.updated_by ?? null,
  };
}

const notFound = (name: string) => new ApiError(404, `No MCP tool named '${name.slice(0, 64)}'`, { param: 'name' });
