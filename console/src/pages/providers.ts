import { get, getAll, patch, post } from '../api.js';
import { h } from '../dom.js';
import { attempt, formatDate, labelled, submitting, truncatedNote } from '../ui.js';

interface Endpoint {
  url: string;
  /** The administrative switch. */
  enabled: boolean;
  /** Live health (false in a cool-down after failures). */
  healthy: boolean;
  priority: number;
  weight: number;
}
interface Provider {
  id: string;
  name: string;
  vendor: string;
  active: boolean;
  base_url?: string;
  endpoints?: Endpoint[];
  api_key_configured?: boolean;
  model_count?: number;
  model_active_count?: number;
  last_synced_at?: number | null;
  last_sync_error?: string | null;
}
type PriceUnit =
  | 'per_1k_prompt_tokens'
  | 'per_1k_completion_tokens'
  | 'per_1k_cached_prompt_tokens'
  | 'per_1m_prompt_tokens'
  | 'per_1m_completion_tokens'
  | 'per_1m_cached_prompt_tokens'
  | 'per_request';
interface PriceLine {
  amount_micro_usd: number;
  currency: string;
  unit: PriceUnit;
}
interface ProviderModel {
  id: string;
  model_public_id: string;
  model_display_name: string;
  provider_id: string;
  active: boolean;
  pricing?: { lines: PriceLine[] };
}
interface SyncResult {
  sync_id: string;
  added: number;
  updated: number;
  deactivated: number;
}
interface SyncRun {
  id: string;
  status: 'queued' | 'running' | 'succeeded' | 'failed';
  providers_synced?: number;
  providers_failed?: number;
  added?: number;
  updated?: number;
  deactivated?: number;
  error?: string | null;
}

/**
 * The four prices the form edits, in USD, with the per-1k unit that prices the same thing: the API
 * refuses two lines pricing one thing, so a per-1k line is shown converted to per 1M, kept as it is
 * while its field is unchanged, and replaced by the per-1M line when the field is changed.
 */
const PRICE_FIELDS: Array<[PriceUnit, PriceUnit | null, string]> = [
  ['per_1m_prompt_tokens', 'per_1k_prompt_tokens', 'Prompt, USD per 1M tokens'],
  ['per_1m_completion_tokens', 'per_1k_completion_tokens', 'Completion, USD per 1M tokens'],
  // (not "Cached prompt, USD per 1M tokens": a label containing another field's whole label makes
  // that field's name ambiguous to assistive technology and to tests that find fields by label)
  ['per_1m_cached_prompt_tokens', 'per_1k_cached_prompt_tokens', 'Cached prompt tokens, USD per 1M'],
  ['per_request', null, 'USD per request'],
];
const usd = (micro: number) => String(micro / 1e6);

/**
 * "url priority weight [off]" per line ⇄ endpoint objects. `off` marks an endpoint switched off by
 * an administrator; every line is sent with its switch, so saving never turns one back on.
 */
function endpointsText(endpoints: Endpoint[] = []): string {
  return endpoints.map((e) => `${e.url} ${e.priority} ${e.weight}${e.enabled === false ? ' off' : ''}`).join('\n');
}
function parseEndpoints(text: string): Array<{ url: string; enabled: boolean; priority?: number; weight?: number }> {
  return text
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter((parts) => parts[0])
    .map(([url, ...rest]) => {
      const off = rest.some((word) => word.toLowerCase() === 'off');
      const [priority, weight] = rest.filter((word) => word.toLowerCase() !== 'off');
      return { url: url!, enabled: !off, ...(priority ? { priority: Number(priority) } : {}), ...(weight ? { weight: Number(weight) } : {}) };
    });
}

/**
 * Admins: register providers, edit them (name, URL, key, endpoints, active), sync them (one now, or
 * all in the background with the run's status), set model prices, and enable or disable models.
 */
export function providersPage(root: HTMLElement) {
  const status = h('div', { class: 'slot' });
  const providerSlot = h('div', {});
  const modelSlot = h('div', {});

  const name = h('input', { name: 'name', required: true, autocomplete: 'off' });
  const vendor = h('input', { name: 'vendor', required: true, value: 'openai', autocomplete: 'off' });
  const baseUrl = h('input', { name: 'base_url', type: 'url', required: true, placeholder: 'https://api.example.com/v1', autocomplete: 'off' });
  const key = h('input', { name: 'api_key', type: 'password', autocomplete: 'off' });
  const form = h(
    'form',
    { class: 'card', 'aria-label': 'Register a provider' },
    h('h2', {}, 'Register a provider'),
    labelled('Name', name),
    labelled('Vendor', vendor),
    labelled('Base URL', baseUrl),
    labelled('Provider API key (optional)', key),
    h('button', { type: 'submit' }, 'Register'),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body: Record<string, string> = { name: name.value, vendor: vendor.value, base_url: baseUrl.value };
    if (key.value.trim()) body.api_key = key.value.trim();
    const created = await submitting(form, () => attempt(status, () => post<Provider>('/v1/admin/providers', body)));
    if (created) {
      key.value = '';
      status.append(h('p', { class: 'ok', role: 'status' }, `Registered ${created.name}.`));
      await refresh();
    }
  });

  const syncStatus = h('p', { class: 'sync-status', role: 'status' });
  const syncAll = h('button', { type: 'button', class: 'secondary' }, 'Sync every provider in the background');
  syncAll.addEventListener('click', async () => {
    const run = await attempt(status, () => post<SyncRun>('/v1/admin/providers/sync', {}));
    if (run) await followRun(run.id);
  });

  /** Asks for the run's status (with growing pauses, for a minute at most) until it has finished. */
  async function followRun(id: string) {
    const began = Date.now();
    syncAll.disabled = true;
    try {
      for (let pause = 250; ; pause = Math.min(pause * 2, 4000)) {
        const run = await attempt(status, () => get<SyncRun>(`/v1/admin/providers/sync/${encodeURIComponent(id)}`));
        if (!run) return;
        syncStatus.dataset.syncStatus = run.status;
        syncStatus.textContent =
          run.status === 'succeeded' || run.status === 'failed'
            ? `Sync ${run.status}: ${run.providers_synced ?? 0} providers synced, ${run.providers_failed ?? 0} failed; ${run.added ?? 0} models added, ${run.updated ?? 0} updated, ${run.deactivated ?? 0} deactivated.${run.error ? ` ${run.error}` : ''}`
            : `Sync ${run.status}…`;
        if (run.status === 'succeeded' || run.status === 'failed') return void (await refresh());
        if (Date.now() - began > 60_000) return;
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    } finally {
      syncAll.disabled = false;
    }
  }

  const bulk = (enable: boolean) =>
    h('button', { type: 'button', class: 'secondary', onclick: async () => (await attempt(status, () => post('/v1/admin/models/provider-models/bulk-toggle', { enable }))) !== undefined && refresh() }, enable ? 'Enable all models' : 'Disable all models');

  root.replaceChildren(
    h('h1', {}, 'Providers and models'),
    form,
    h('section', { 'aria-label': 'Providers' }, h('h2', {}, 'Providers'), h('div', { class: 'row' }, syncAll), syncStatus, providerSlot),
    h('section', { 'aria-label': 'Models' }, h('h2', {}, 'Models'), h('div', { class: 'row' }, bulk(true), bulk(false)), modelSlot),
  );

  async function refresh() {
    // Every page of each list (bounded): a platform with many providers or models shows them all.
    const providers = await attempt(providerSlot, () => getAll<Provider>('/v1/admin/providers'));
    if (providers) providerSlot.replaceChildren(providerTable(providers.data), truncatedNote(providers));
    const models = await attempt(modelSlot, () => getAll<ProviderModel>('/v1/admin/models/provider-models'));
    if (models) modelSlot.replaceChildren(modelTable(models.data, providers?.data ?? []), truncatedNote(models));
  }

  function providerTable(rows: Provider[]) {
    if (!rows.length) return h('p', {}, 'No provider yet.');
    return h(
      'table',
      { class: 'providers' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Vendor'), h('th', {}, 'Base URL'), h('th', {}, 'Models'), h('th', {}, 'Last sync'), h('th', {}, ''))),
      h(
        'tbody',
        {},
        ...rows.flatMap((p) => {
          const slot = h('div', {});
          const editRow = h('tr', { class: 'details', hidden: true }, h('td', { colspan: '6' }));
          const sync = async () => {
            const result = await attempt(slot, () => post<SyncResult>(`/v1/admin/providers/${encodeURIComponent(p.id)}/sync`));
            if (!result) return;
            await refresh();
            syncStatus.dataset.syncStatus = 'succeeded';
            syncStatus.textContent = `Synced ${p.name}: ${result.added} models added, ${result.updated} updated, ${result.deactivated} deactivated.`;
          };
          const edit = h('button', { type: 'button', class: 'secondary', 'aria-expanded': 'false', 'aria-label': `Edit ${p.name}` }, 'Edit…');
          edit.addEventListener('click', () => {
            const open = editRow.hidden;
            editRow.hidden = !open;
            edit.setAttribute('aria-expanded', String(open));
            if (open) editRow.firstElementChild!.replaceChildren(providerForm(p));
          });
          return [
            h(
              'tr',
              { 'data-provider-id': p.id },
              h('td', {}, p.name, p.active ? null : h('span', { class: 'badge' }, ' inactive')),
              h('td', {}, p.vendor),
              h('td', {}, p.base_url ?? '', p.endpoints && p.endpoints.length > 1 ? h('div', { class: 'badge' }, `${p.endpoints.length} endpoints`) : null),
              h('td', {}, `${p.model_active_count ?? 0} / ${p.model_count ?? 0} enabled`),
              h('td', {}, formatDate(p.last_synced_at), p.last_sync_error ? h('div', { class: 'error' }, p.last_sync_error) : null),
              h('td', {}, h('div', { class: 'row' }, h('button', { type: 'button', class: 'secondary', 'aria-label': `Sync ${p.name}`, onclick: () => void sync() }, 'Sync'), edit), slot),
            ),
            editRow,
          ];
        }),
      ),
    );
  }

  function modelTable(rows: ProviderModel[], providers: Provider[]) {
    if (!rows.length) return h('p', {}, 'No model yet: register a provider and sync it.');
    const providerName = new Map(providers.map((p) => [p.id, p.name]));
    return h(
      'table',
      { class: 'models' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Model'), h('th', {}, 'Display name'), h('th', {}, 'Provider'), h('th', {}, 'Status'), h('th', {}, 'Price'), h('th', {}, ''))),
      h(
        'tbody',
        {},
        ...rows.flatMap((m) => {
          const slot = h('div', {});
          const toggle = async () => {
            if ((await attempt(slot, () => patch(`/v1/admin/models/provider-models/${encodeURIComponent(m.id)}`, { active: !m.active }))) !== undefined) await refresh();
          };
          const priceRow = h('tr', { class: 'details', hidden: true }, h('td', { colspan: '6' }));
          const pricing = h('button', { type: 'button', class: 'secondary', 'aria-expanded': 'false', 'aria-label': `Pricing of ${m.model_public_id}` }, 'Pricing…');
          pricing.addEventListener('click', () => {
            const open = priceRow.hidden;
            priceRow.hidden = !open;
            pricing.setAttribute('aria-expanded', String(open));
            if (open) priceRow.firstElementChild!.replaceChildren(pricingForm(m));
          });
          return [
            h(
              'tr',
              { 'data-model': m.model_public_id },
              h('td', { class: 'model-id' }, m.model_public_id),
              h('td', {}, m.model_display_name),
              h('td', {}, providerName.get(m.provider_id) ?? m.provider_id),
              h('td', {}, m.active ? 'enabled' : 'disabled'),
              h('td', { class: 'price' }, priceSummary(m.pricing?.lines ?? [])),
              h('td', {}, h('div', { class: 'row' }, h('button', { type: 'button', class: 'secondary', 'aria-label': `${m.active ? 'Disable' : 'Enable'} ${m.model_public_id}`, onclick: toggle }, m.active ? 'Disable' : 'Enable'), pricing), slot),
            ),
            priceRow,
          ];
        }),
      ),
    );
  }

  /** Name, base URL, key (blank keeps it), endpoints and active; only changed fields are sent. */
  function providerForm(p: Provider): HTMLElement {
    const name = h('input', { name: 'name', required: true, autocomplete: 'off', value: p.name });
    const base = h('input', { name: 'base_url', type: 'url', required: true, autocomplete: 'off', value: p.base_url ?? '' });
    const key = h('input', { name: 'api_key', type: 'password', autocomplete: 'off', placeholder: p.api_key_configured ? 'set (leave blank to keep it)' : 'none' });
    const removeKey = h('input', { name: 'remove_key', type: 'checkbox' });
    const active = h('input', { name: 'active', type: 'checkbox', checked: p.active });
    const endpoints = h('textarea', { name: 'endpoints', rows: '3', placeholder: 'https://a.example.com/v1 0 1  (add "off" to switch one off)' });
    endpoints.value = endpointsText(p.endpoints);
    const slot = h('div', {});
    const form = h(
      'form',
      { class: 'edit-provider', 'aria-label': `Edit ${p.name}` },
      h('div', { class: 'row' }, labelled('Provider name', name), labelled('Provider base URL', base), labelled('New provider API key', key)),
      h('div', { class: 'row' }, h('label', {}, removeKey, ' Remove the API key'), h('label', {}, active, ' Active')),
      labelled('Endpoints (one per line: URL, priority, weight, and "off" when switched off)', endpoints),
      h('button', { type: 'submit' }, 'Save provider'),
      slot,
    );
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const body: Record<string, unknown> = {};
      if (name.value !== p.name) body.name = name.value;
      if (base.value !== (p.base_url ?? '')) body.base_url = base.value;
      if (removeKey.checked) body.api_key = null;
      else if (key.value.trim()) body.api_key = key.value.trim();
      if (active.checked !== p.active) body.active = active.checked;
      if (endpoints.value.trim() !== endpointsText(p.endpoints).trim()) body.endpoints = parseEndpoints(endpoints.value);
      if (!Object.keys(body).length) return void slot.replaceChildren(h('p', { role: 'status' }, 'Nothing changed.'));
      const saved = await attempt(slot, () => patch<Provider>(`/v1/admin/providers/${encodeURIComponent(p.id)}`, body));
      if (!saved) return;
      await refresh();
      status.replaceChildren(h('p', { class: 'ok', role: 'status' }, `Saved ${saved.name}.`));
    });
    return form;
  }

  /** Prices per 1M prompt, completion and cached prompt tokens and per request, in USD; a price not changed keeps its stored line. */
  function pricingForm(m: ProviderModel): HTMLElement {
    const lines = m.pricing?.lines ?? [];
    const inputs = PRICE_FIELDS.map(([unit, perThousand, label]) => {
      const units = new Set<PriceUnit>(perThousand ? [unit, perThousand] : [unit]);
      const line = lines.find((l) => l.unit === unit) ?? lines.find((l) => l.unit === perThousand);
      const shown = line ? usd(line.unit === unit ? line.amount_micro_usd : line.amount_micro_usd * 1000) : '';
      const input = h('input', { name: unit, type: 'number', min: '0', step: 'any', placeholder: 'none', value: shown || undefined });
      return { unit, units, label, input, shown };
    });
    const slot = h('div', {});
    const form = h(
      'form',
      { class: 'pricing', 'aria-label': `Pricing of ${m.model_public_id}` },
      h('div', { class: 'row' }, ...inputs.map(({ label, input }) => labelled(label, input))),
      h('button', { type: 'submit' }, 'Save pricing'),
      slot,
    );
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      // A field left as shown keeps its stored line (per 1k or per 1M); a changed one replaces every
      // line pricing the same thing (or removes them when emptied).
      const changed = inputs.filter(({ input, shown }) => input.value !== shown);
      const replaced = new Set(changed.flatMap(({ units }) => [...units]));
      const next: Array<{ unit: PriceUnit; amount_micro_usd: number; currency: string }> = lines.filter((l) => !replaced.has(l.unit));
      for (const { unit, input } of changed) if (input.value !== '') next.push({ unit, amount_micro_usd: Math.round(Number(input.value) * 1e6), currency: 'USD' });
      if ((await attempt(slot, () => patch(`/v1/admin/models/provider-models/${encodeURIComponent(m.id)}`, { pricing: { lines: next } }))) !== undefined) await refresh();
    });
    return form;
  }

  void refresh();
}

const UNIT_LABELS: Record<PriceUnit, string> = {
  per_1k_prompt_tokens: '/1k prompt',
  per_1k_completion_tokens: '/1k completion',
  per_1m_prompt_tokens: '/1M prompt',
  per_1m_completion_tokens: '/1M completion',
  per_1k_cached_prompt_tokens: '/1k cached prompt',
  per_1m_cached_prompt_tokens: '/1M cached prompt',
  per_request: '/request',
};
function priceSummary(lines: PriceLine[]): string {
  return lines.length ? lines.map((l) => `$${usd(l.amount_micro_usd)}${UNIT_LABELS[l.unit]}`).join(', ') : '—';
}
