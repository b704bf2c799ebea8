import { del, getAll, post } from '../api.js';
import { h } from '../dom.js';
import type { Me } from '../session.js';
import { attempt, formatDate, labelled, submitting, truncatedNote } from '../ui.js';

interface ApiKey {
  id: string;
  name: string | null;
  prefix: string;
  last_four: string;
  tier: string;
  limits: { requests_per_minute?: number | null; requests_per_day?: number | null } | null;
  created_at: number;
  last_used_at: number | null;
  expires_at: number | null;
  key?: string;
  budget_period?: 'day' | 'month';
  max_budget_micro_usd?: number | null;
  max_tokens?: number | null;
  allowed_models?: string[] | null;
}

/**
 * Micro-USD as dollars: cents at least, and every further digit the amount has ($0.005 stays
 * $0.005 rather than rounding to $0.01, and $0.004 to a budget of $0.00).
 */
export function formatUsd(micro: number): string {
  return (micro / 1e6).toFixed(6).replace(/0{1,4}$/, '');
}

/** "$5.00 per day, 10000 tokens per day, models: a, b" from a key answer's budget fields. */
export function spendSummary(k: { budget_period?: string; max_budget_micro_usd?: number | null; max_tokens?: number | null; allowed_models?: string[] | null }): string {
  const per = k.budget_period ?? 'day';
  const parts: string[] = [];
  if (k.max_budget_micro_usd != null) parts.push(`$${formatUsd(k.max_budget_micro_usd)} per ${per}`);
  if (k.max_tokens != null) parts.push(`${k.max_tokens} tokens per ${per}`);
  parts.push(k.allowed_models ? `models: ${k.allowed_models.join(', ')}` : 'every model');
  return parts.join('; ');
}

/** Whether a key answer carries a spending or token budget or an allow-list (the lists answer them with each key). */
const hasSpend = (k: ApiKey) => k.max_budget_micro_usd != null || k.max_tokens != null || k.allowed_models != null;

/** "a, b*" → ["a", "b*"]; blank → null (no allow-list). */
export function modelList(text: string): string[] | null {
  const models = text.split(/[,\s]+/).map((m) => m.trim()).filter(Boolean);
  return models.length ? models : null;
}

/**
 * API keys. Admins use the admin endpoints (any tier and limits, for themselves here); other users
 * use their own `/auth/api-keys`, which the API only serves to a bearer token, so with an API-key
 * sign-in they see the API's refusal in place.
 */
export function keysPage(root: HTMLElement, me: Me) {
  const listSlot = h('div', {});
  const status = h('div', {});
  const secretSlot = h('div', {});
  const base = me.is_admin ? '/v1/admin/api-keys' : '/auth/api-keys';

  const name = h('input', { name: 'name', required: true, autocomplete: 'off' });
  const tier = h('select', { name: 'tier' }, ...['free', 'pro', 'enterprise'].map((t) => h('option', { value: t }, t)));
  const perDay = h('input', { name: 'requests_per_day', type: 'number', min: '1', placeholder: 'no limit' });
  const perMinute = h('input', { name: 'requests_per_minute', type: 'number', min: '1', placeholder: 'no limit' });
  const expires = h('input', { name: 'expires_in_days', type: 'number', min: '1', placeholder: 'never' });
  const budgetUsd = h('input', { name: 'max_budget_usd', type: 'number', min: '0', step: '0.01', placeholder: 'no budget' });
  const budgetPeriod = h('select', { name: 'budget_period' }, h('option', { value: 'day' }, 'per day'), h('option', { value: 'month' }, 'per month'));
  const maxTokens = h('input', { name: 'max_tokens', type: 'number', min: '0', placeholder: 'no limit' });
  const allowed = h('input', { name: 'allowed_models', autocomplete: 'off', placeholder: 'every model (e.g. gpt-4o, llama-*)' });
  const form = h(
    'form',
    { class: 'card', 'aria-label': 'Create an API key' },
    h('h2', {}, 'Create a key'),
    labelled('Name', name),
    me.is_admin ? labelled('Tier', tier) : null,
    me.is_admin ? labelled('Budget: requests per day', perDay) : null,
    me.is_admin ? labelled('Budget: requests per minute', perMinute) : null,
    me.is_admin ? labelled('Spending budget (USD)', budgetUsd) : null,
    me.is_admin ? labelled('Budget period', budgetPeriod) : null,
    me.is_admin ? labelled('Token budget', maxTokens) : null,
    me.is_admin ? labelled('Allowed models (comma-separated, * matches anything)', allowed) : null,
    labelled('Expires in days', expires),
    h('button', { type: 'submit' }, 'Create'),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body: Record<string, unknown> = { name: name.value };
    if (me.is_admin) {
      body.user_id = me.id;
      body.tier = tier.value;
      if (perDay.value || perMinute.value) {
        body.limits = { requests_per_day: perDay.value ? Number(perDay.value) : null, requests_per_minute: perMinute.value ? Number(perMinute.value) : null };
      }
      if (budgetUsd.value || maxTokens.value) body.budget_period = budgetPeriod.value;
      if (budgetUsd.value) body.max_budget_micro_usd = Math.round(Number(budgetUsd.value) * 1e6);
      if (maxTokens.value) body.max_tokens = Number(maxTokens.value);
      const models = modelList(allowed.value);
      if (models) body.allowed_models = models;
    }
    if (expires.value) body.expires_in_days = Number(expires.value);
    const created = await submitting(form, () => attempt(status, () => post<ApiKey>(base, body)));
    if (!created?.key) return;
    form.reset();
    // The secret exists only in this element until the user dismisses it or leaves the page.
    const secret = h('code', { class: 'secret' }, created.key);
    secretSlot.replaceChildren(
      h(
        'div',
        { class: 'card secret-box', role: 'status' },
        h('strong', {}, 'Copy this key now: it will not be shown again. '),
        secret,
        me.is_admin ? h('p', { class: 'key-spend' }, `${created.name ?? 'Key'}: ${spendSummary(created)}`) : null,
        h('button', { type: 'button', class: 'secondary', onclick: () => secretSlot.replaceChildren() }, 'I have copied it'),
      ),
    );
    await refresh();
  });

  root.replaceChildren(h('h1', {}, 'API keys'), secretSlot, form, h('section', { 'aria-label': 'Keys' }, h('h2', {}, 'Your keys'), listSlot));

  async function refresh() {
    // Every page of the list (bounded): a user with more keys than one API page sees them all.
    const keys = await attempt(listSlot, () => getAll<ApiKey>(me.is_admin ? `${base}?user_id=${encodeURIComponent(me.id)}` : base));
    if (!keys) return;
    if (!keys.data.length) return void listSlot.replaceChildren(h('p', {}, 'No key yet.'));
    listSlot.replaceChildren(
      h(
        'table',
        { class: 'keys' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Key'), h('th', {}, 'Tier'), h('th', {}, 'Budget'), h('th', {}, 'Created'), h('th', {}, 'Last used'), h('th', {}, ''))),
        h(
          'tbody',
          {},
          ...keys.data.map((k) => {
            const slot = h('div', {});
            const budget = k.limits ? [k.limits.requests_per_day ? `${k.limits.requests_per_day}/day` : '', k.limits.requests_per_minute ? `${k.limits.requests_per_minute}/min` : ''].filter(Boolean).join(', ') : '';
            return h(
              'tr',
              { 'data-key-id': k.id },
              h('td', {}, k.name ?? ''),
              h('td', {}, h('code', {}, `${k.prefix}…${k.last_four}`)),
              h('td', {}, k.tier),
              h('td', {}, budget || 'tier default', hasSpend(k) ? h('div', { class: 'badge key-budget' }, spendSummary(k)) : null),
              h('td', {}, formatDate(k.created_at)),
              h('td', {}, formatDate(k.last_used_at)),
              h('td', {}, h('button', { type: 'button', class: 'danger', 'aria-label': `Revoke ${k.name ?? k.id}`, onclick: async () => (await attempt(slot, () => del(`${base}/${encodeURIComponent(k.id)}`))) !== undefined && refresh() }, 'Revoke'), slot),
            );
          }),
        ),
      ),
      truncatedNote(keys),
    );
  }
  void refresh();
}
