import { get, patch } from '../api.js';
import { h } from '../dom.js';
import type { List, Me } from '../session.js';
import { attempt, formatDate, labelled } from '../ui.js';
import { modelList, spendSummary } from './keys.js';

type Spend = Pick<User, 'budget_period' | 'max_budget_micro_usd' | 'max_tokens' | 'allowed_models'>;
/** A user as the admin API answers it (list, GET and PATCH alike): the account with its budget and allow-list. */
interface User {
  id: string;
  email: string | null;
  username: string | null;
  full_name: string | null;
  email_verified: boolean;
  is_guest: boolean;
  is_admin: boolean;
  disabled: boolean;
  created_at: number;
  budget_period: 'day' | 'month';
  max_budget_micro_usd: number | null;
  max_tokens: number | null;
  allowed_models: string[] | null;
}

const PAGE_SIZE = 50;
const nameOf = (u: User) => u.email ?? u.username ?? u.id;

/**
 * Admins: find users, disable or re-enable them, mark their e-mail verified (which raises the
 * account's rate-limit tier), set their spending budget and model allow-list.
 */
export function usersPage(root: HTMLElement, me: Me) {
  const email = h('input', { name: 'email', type: 'search', autocomplete: 'off', placeholder: 'any' });
  const kind = h('select', { name: 'kind' }, h('option', { value: 'accounts' }, 'Accounts (no guests)'), h('option', { value: 'all' }, 'Everyone'), h('option', { value: 'guests' }, 'Guests'), h('option', { value: 'disabled' }, 'Disabled'));
  const listSlot = h('div', {});
  const filter = h('form', { class: 'card row', 'aria-label': 'Find users' }, labelled('E-mail', email), labelled('Show', kind), h('button', { type: 'submit' }, 'Find'));
  // The list a page at a time (oldest account first, as the API orders it); a new search starts at its first page.
  // The page buttons move through the list on screen: its filters are the ones applied by Find (or
  // by choosing what to show), not a field changed since.
  let offset = 0;
  let applied = { email: '', kind: kind.value };
  const apply = () => {
    applied = { email: email.value.trim(), kind: kind.value };
    offset = 0;
    void refresh();
  };
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    apply();
  });
  kind.addEventListener('change', apply);
  root.replaceChildren(h('h1', {}, 'Users'), filter, h('section', { 'aria-label': 'Users' }, listSlot));

  // Only the latest search draws the list: an earlier one answered later (the first load, while a
  // search typed at once is already back) would replace it, and close a form opened on it.
  let searches = 0;
  async function refresh() {
    const search = ++searches;
    const query = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(offset) });
    if (applied.email) query.set('email', applied.email);
    if (applied.kind === 'accounts') query.set('is_guest', 'false');
    if (applied.kind === 'guests') query.set('is_guest', 'true');
    if (applied.kind === 'disabled') query.set('disabled', 'true');
    const users = await attempt(listSlot, () => get<List<User> & { has_more?: boolean; total_count?: number }>(`/v1/admin/users?${query}`));
    if (search !== searches || !users) return;
    if (!users.data.length) return void listSlot.replaceChildren(h('p', {}, offset ? 'No more users.' : 'No user matches.'), offset ? pager(false) : '');
    const hasMore = users.has_more ?? (users.total_count !== undefined && offset + users.data.length < users.total_count);
    listSlot.replaceChildren(
      h('p', { class: 'page-range', 'aria-live': 'polite' }, `${offset + 1}–${offset + users.data.length}${users.total_count !== undefined ? ` of ${users.total_count}` : ''}`),
      h(
        'table',
        { class: 'users' },
        h('thead', {}, h('tr', {}, h('th', {}, 'User'), h('th', {}, 'Kind'), h('th', {}, 'Status'), h('th', {}, 'Created'), h('th', {}, ''))),
        h('tbody', {}, ...users.data.flatMap(row)),
      ),
      pager(hasMore),
    );
  }

  /** Previous page / Next page under the list. */
  function pager(hasMore: boolean): HTMLElement {
    const move = (to: number) => () => {
      offset = Math.max(0, to);
      void refresh();
    };
    return h(
      'div',
      { class: 'row' },
      h('button', { type: 'button', class: 'secondary', disabled: offset === 0, onclick: move(offset - PAGE_SIZE) }, 'Previous page'),
      h('button', { type: 'button', class: 'secondary', disabled: !hasMore, onclick: move(offset + PAGE_SIZE) }, 'Next page'),
    );
  }

  function row(u: User): HTMLElement[] {
    const slot = h('div', {});
    const budgetRow = h('tr', { class: 'details', hidden: true }, h('td', { colspan: '5' }));
    const self = u.id === me.id;
    const toggle = h(
      'button',
      {
        type: 'button',
        class: u.disabled ? 'secondary' : 'danger',
        'aria-label': `${u.disabled ? 'Enable' : 'Disable'} ${nameOf(u)}`,
        disabled: self && !u.disabled,
        title: self && !u.disabled ? 'You cannot disable yourself' : undefined,
        onclick: async () => (await attempt(slot, () => patch(`/v1/admin/users/${encodeURIComponent(u.id)}`, { disabled: !u.disabled }))) !== undefined && refresh(),
      },
      u.disabled ? 'Enable' : 'Disable',
    );
    // The account's tier follows a verified e-mail (the edge keeps unverified accounts on a lower tier).
    const verify = u.is_guest
      ? null
      : h(
          'button',
          {
            type: 'button',
            class: 'secondary',
            'aria-label': `${u.email_verified ? 'Unverify' : 'Verify'} the e-mail of ${nameOf(u)}`,
            onclick: async () => (await attempt(slot, () => patch(`/v1/admin/users/${encodeURIComponent(u.id)}`, { email_verified: !u.email_verified }))) !== undefined && refresh(),
          },
          u.email_verified ? 'Unverify e-mail' : 'Verify e-mail',
        );
    const budget = h('button', { type: 'button', class: 'secondary', 'aria-expanded': 'false', 'aria-label': `Budget of ${nameOf(u)}` }, 'Budget…');
    budget.addEventListener('click', () => {
      const open = budgetRow.hidden;
      budgetRow.hidden = !open;
      budget.setAttribute('aria-expanded', String(open));
      if (open) budgetRow.firstElementChild!.replaceChildren(budgetForm(u));
    });
    return [
      h(
        'tr',
        { 'data-user-id': u.id },
        h('td', {}, nameOf(u), u.full_name ? h('div', { class: 'badge' }, u.full_name) : null),
        h('td', { class: 'kind' }, [u.is_admin ? 'admin' : '', u.is_guest ? 'guest' : 'account', u.email_verified ? 'e-mail verified' : ''].filter(Boolean).join(', ')),
        h('td', { class: 'status' }, u.disabled ? 'disabled' : 'active'),
        h('td', {}, formatDate(u.created_at)),
        h('td', {}, h('div', { class: 'row' }, toggle, verify, budget), slot),
      ),
      budgetRow,
    ];
  }

  /**
   * The user's budget and allow-list as stored (the list answers them with each user), for the
   * administrator to change. Only the fields that differ from what the form showed are sent, so a
   * change made meanwhile to another field (by another administrator) is kept; a field emptied is
   * sent as null (no budget, every model). "Clear" removes the budget and allow-list.
   */
  function budgetForm(u: User): HTMLElement {
    const usd = h('input', { name: 'max_budget_usd', type: 'number', min: '0', step: 'any', placeholder: 'no budget' });
    const period = h('select', { name: 'budget_period' }, h('option', { value: 'day' }, 'per day'), h('option', { value: 'month' }, 'per month'));
    const tokens = h('input', { name: 'max_tokens', type: 'number', min: '0', step: '1', placeholder: 'no limit' });
    const models = h('input', { name: 'allowed_models', autocomplete: 'off', placeholder: 'every model (e.g. gpt-4o, llama-*)' });
    const status = h('div', {});
    // What the fields were filled with: a field still showing it is not sent.
    let shown = { usd: '', tokens: '', models: '' };
    const show = (spend: Spend) => {
      shown = {
        usd: spend.max_budget_micro_usd == null ? '' : String(spend.max_budget_micro_usd / 1e6),
        tokens: spend.max_tokens == null ? '' : String(spend.max_tokens),
        models: spend.allowed_models ? spend.allowed_models.join(', ') : '',
      };
      usd.value = shown.usd;
      period.value = spend.budget_period;
      tokens.value = shown.tokens;
      models.value = shown.models;
    };
    show(u);
    const form = h(
      'form',
      { class: 'budget', 'aria-label': `Budget of ${nameOf(u)}` },
      h('div', { class: 'row' }, labelled('Spending budget (USD)', usd), labelled('Budget period', period), labelled('Token budget', tokens), labelled('Allowed models', models)),
      h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save budget'), h('button', { type: 'button', class: 'secondary', onclick: () => void save({ max_budget_micro_usd: null, max_tokens: null, allowed_models: null }) }, 'Clear budget and allow-list')),
      status,
    );
    const save = async (body: Record<string, unknown>) => {
      const saved = await attempt(status, () => patch<User>(`/v1/admin/users/${encodeURIComponent(u.id)}`, body));
      if (!saved) return;
      // The row keeps the stored values: the form opened again starts from them.
      u.budget_period = saved.budget_period;
      u.max_budget_micro_usd = saved.max_budget_micro_usd;
      u.max_tokens = saved.max_tokens;
      u.allowed_models = saved.allowed_models;
      show(saved);
      status.replaceChildren(h('p', { class: 'ok', role: 'status' }, `Saved: ${spendSummary(saved)}.`));
    };
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const body: Record<string, unknown> = {};
      if (period.value !== u.budget_period) body.budget_period = period.value;
      if (usd.value !== shown.usd) body.max_budget_micro_usd = usd.value ? Math.round(Number(usd.value) * 1e6) : null;
      if (tokens.value !== shown.tokens) body.max_tokens = tokens.value ? Number(tokens.value) : null;
      const list = modelList(models.value);
      if (JSON.stringify(list) !== JSON.stringify(modelList(shown.models))) body.allowed_models = list;
      if (!Object.keys(body).length) return void status.replaceChildren(h('p', { role: 'status' }, 'Nothing to change: the form shows the stored budget.'));
      void save(body);
    });
    return form;
  }

  void refresh();
}
