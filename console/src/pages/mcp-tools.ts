import type { AdminTool } from '../../../services/mcp-tools/admin/tool.js';
import { get, patch } from '../api.js';
import { h } from '../dom.js';
import type { List } from '../session.js';
import { attempt, labelled } from '../ui.js';

// The admin API's own declaration (a .d.ts: types only, nothing of the service enters the bundle).
type Tool = AdminTool;

/** Admins: the MCP tools with their state; enable or disable one, with a reason that is recorded. */
export function mcpToolsPage(root: HTMLElement) {
  const listSlot = h('div', {});
  root.replaceChildren(
    h('h1', {}, 'MCP tools'),
    h('p', {}, 'A disabled tool disappears from the MCP tool list and refuses calls. The reason is kept with the change and sent with its event.'),
    listSlot,
  );

  async function refresh() {
    const tools = await attempt(listSlot, () => get<List<Tool>>('/v1/admin/mcp/tools'));
    if (!tools) return;
    if (!tools.data.length) return void listSlot.replaceChildren(h('p', {}, 'No MCP tool.'));
    listSlot.replaceChildren(
      h(
        'table',
        { class: 'tools' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Tool'), h('th', {}, 'State'), h('th', {}, 'Last change'), h('th', {}, 'Change'))),
        h('tbody', {}, ...tools.data.map(row)),
      ),
    );
  }

  function row(tool: Tool): HTMLElement {
    const slot = h('div', {});
    const reason = h('input', { name: 'reason', maxlength: '500', autocomplete: 'off', placeholder: 'optional' });
    const form = h(
      'form',
      { class: 'row', 'aria-label': `${tool.enabled ? 'Disable' : 'Enable'} ${tool.name}` },
      labelled(`Reason for ${tool.name}`, reason),
      h('button', { type: 'submit', class: tool.enabled ? 'danger' : 'secondary' }, tool.enabled ? `Disable ${tool.name}` : `Enable ${tool.name}`),
    );
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const body = { enabled: !tool.enabled, reason: reason.value.trim() || null };
      if ((await attempt(slot, () => patch(`/v1/admin/mcp/tools/${encodeURIComponent(tool.name)}`, body))) !== undefined) await refresh();
    });
    return h(
      'tr',
      { 'data-tool': tool.name, 'data-enabled': String(tool.enabled) },
      h('td', {}, h('strong', {}, tool.title || tool.name), h('div', { class: 'badge' }, tool.name), h('div', {}, tool.description)),
      h(
        'td',
        { class: 'state' },
        tool.enabled ? 'enabled' : 'disabled',
        tool.available ? null : h('div', { class: 'badge' }, `unavailable: ${tool.unavailable_reason ?? 'not configured'}`),
      ),
      h('td', {}, tool.updated_at ? `${tool.updated_at.replace('T', ' ').slice(0, 16)}${tool.updated_by ? ` by ${tool.updated_by}` : ''}` : '—', tool.reason ? h('div', { class: 'reason' }, `Reason: ${tool.reason}`) : null),
      h('td', {}, form, slot),
    );
  }

  void refresh();
}
