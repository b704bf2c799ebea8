import { getAll, patch } from '../api.js';
import { h } from '../dom.js';
import { attempt, formatDate, truncatedNote } from '../ui.js';

interface CatalogEntry {
  public_id: string;
  model_display_name: string;
  family: string | null;
  status: string;
  active: boolean;
  context_length: number | null;
  supports_tools: boolean;
  supports_reasoning: boolean;
  supports_images: boolean;
  supports_embeddings: boolean;
  manual_fields: string[];
  last_synced_at: number | null;
}

const CAPABILITIES: Array<[keyof CatalogEntry, string]> = [
  ['supports_tools', 'tools'],
  ['supports_reasoning', 'reasoning'],
  ['supports_images', 'images'],
  ['supports_embeddings', 'embeddings'],
];

const catalogPath = (publicId: string) => `/v1/admin/models/catalogs/${publicId.split('/').map(encodeURIComponent).join('/')}`;

/** Admins: the model catalog (what synchronisation learnt about each public model); enable or disable entries. */
export function catalogPage(root: HTMLElement) {
  const status = h('div', {});
  const listSlot = h('div', {});
  // The bulk buttons change the same flag as each row's button and the status column: the entry's
  // `active` (PATCH per entry), for every entry of every page.
  const setAll = async (enable: boolean) => {
    const changed = await attempt(status, async () => {
      const entries = await getAll<CatalogEntry>('/v1/admin/models/catalogs');
      let count = 0;
      for (const e of entries.data) {
        if (e.active === enable) continue;
        await patch(catalogPath(e.public_id), { active: enable });
        count++;
      }
      return count;
    });
    if (changed !== undefined) status.replaceChildren(h('p', { class: 'ok', role: 'status' }, `${enable ? 'Enabled' : 'Disabled'} ${changed} catalog ${changed === 1 ? 'entry' : 'entries'}.`));
    // Also when it stopped part-way with an error: the entries changed before it show their new state.
    await refresh();
  };
  const bulk = (enable: boolean) =>
    h('button', { type: 'button', class: 'secondary', onclick: () => void setAll(enable) }, enable ? 'Enable every catalog model' : 'Disable every catalog model');
  root.replaceChildren(
    h('h1', {}, 'Model catalog'),
    h('p', {}, 'One entry per public model name, shared by the providers that serve it. Disabling an entry disables its provider models.'),
    h('div', { class: 'row' }, bulk(true), bulk(false)),
    status,
    listSlot,
  );

  async function refresh() {
    const entries = await attempt(listSlot, () => getAll<CatalogEntry>('/v1/admin/models/catalogs'));
    if (!entries) return;
    if (!entries.data.length) return void listSlot.replaceChildren(h('p', {}, 'The catalog is empty: register a provider and sync it.'));
    listSlot.replaceChildren(
      h(
        'table',
        { class: 'catalog' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Model'), h('th', {}, 'Display name'), h('th', {}, 'Family'), h('th', {}, 'Context'), h('th', {}, 'Capabilities'), h('th', {}, 'Status'), h('th', {}, 'Last sync'), h('th', {}, ''))),
        h(
          'tbody',
          {},
          ...entries.data.map((e) => {
            const slot = h('div', {});
            const toggle = async () => {
              if ((await attempt(slot, () => patch(catalogPath(e.public_id), { active: !e.active }))) !== undefined) await refresh();
            };
            return h(
              'tr',
              { 'data-catalog': e.public_id },
              h('td', {}, e.public_id),
              h('td', {}, e.model_display_name, e.manual_fields.length ? h('div', { class: 'badge' }, `set by hand: ${e.manual_fields.join(', ')}`) : null),
              h('td', {}, e.family ?? ''),
              h('td', {}, e.context_length ?? '—'),
              h('td', {}, CAPABILITIES.filter(([field]) => e[field]).map(([, label]) => label).join(', ') || '—'),
              h('td', { class: 'state' }, `${e.active ? 'enabled' : 'disabled'} (${e.status})`),
              h('td', {}, formatDate(e.last_synced_at)),
              h('td', {}, h('button', { type: 'button', class: 'secondary', 'aria-label': `${e.active ? 'Disable' : 'Enable'} catalog entry ${e.public_id}`, onclick: toggle }, e.active ? 'Disable' : 'Enable'), slot),
            );
          }),
        ),
      ),
      truncatedNote(entries),
    );
  }

  void refresh();
}
