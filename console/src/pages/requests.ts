// The admin API's own declaration (a .d.ts: types only, nothing of the service enters the bundle).
import type { RequestLogEntry } from '../../../services/llm-api/requests/entry.js';
import { get } from '../api.js';
import { h } from '../dom.js';
import type { List } from '../session.js';
import { attempt, formatDate, labelled } from '../ui.js';

type Page = List<RequestLogEntry> & { has_more: boolean; total_count: number };

const PAGE_SIZE = 20;

/**
 * Admins: the recent-requests log llm-api keeps (`GET /v1/admin/requests`), newest first: find a
 * request by the id a user quotes, or everything one user or one key did, a page at a time.
 */
export function requestsPage(root: HTMLElement) {
  const requestId = h('input', { name: 'request_id', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'any' });
  const userId = h('input', { name: 'user_id', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'any' });
  const keyId = h('input', { name: 'key_id', type: 'search', autocomplete: 'off', spellcheck: 'false', placeholder: 'any (key_…)' });
  const listSlot = h('div', {});
  const filter = h(
    'form',
    { class: 'card row', 'aria-label': 'Find requests' },
    labelled('Request id', requestId),
    labelled('User id', userId),
    labelled('Key id', keyId),
    h('button', { type: 'submit' }, 'Find'),
  );
  let offset = 0;
  // The filters of the list on screen: the page buttons move through that list, even when a field
  // was changed since without pressing Find.
  let applied: Record<string, string> = {};
  const apply = () => {
    applied = {};
    for (const [name, input] of [['request_id', requestId], ['user_id', userId], ['key_id', keyId]] as const) {
      if (input.value.trim()) applied[name] = input.value.trim();
    }
    offset = 0;
  };
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    apply();
    void refresh();
  });
  root.replaceChildren(
    h('h1', {}, 'Recent requests'),
    h('p', {}, 'Requests the LLM API served recently, newest first: a bounded log (the newest rows of the last day by default), written a moment after each request ends.'),
    filter,
    h('section', { 'aria-label': 'Requests' }, listSlot),
  );

  /** Narrow the list to one user or key from a row (the other filters are cleared). */
  const only = (field: HTMLInputElement, value: string) => {
    for (const input of [requestId, userId, keyId]) input.value = input === field ? value : '';
    apply();
    void refresh();
  };

  async function refresh() {
    const query = new URLSearchParams({ ...applied, limit: String(PAGE_SIZE), offset: String(offset) });
    const page = await attempt(listSlot, () => get<Page>(`/v1/admin/requests?${query}`));
    if (!page) return;
    if (!page.data.length) return void listSlot.replaceChildren(h('p', {}, offset ? 'No more requests.' : 'No request matches.'));
    const first = offset + 1;
    const last = offset + page.data.length;
    const move = (to: number) => () => {
      offset = Math.max(0, to);
      void refresh();
    };
    listSlot.replaceChildren(
      h('p', { class: 'page-range', 'aria-live': 'polite' }, `${first}–${last} of ${page.total_count}`),
      h(
        'table',
        { class: 'requests' },
        h(
          'thead',
          {},
          h('tr', {}, h('th', {}, 'Ended'), h('th', {}, 'Request'), h('th', {}, 'Status'), h('th', {}, 'Duration'), h('th', {}, 'Who'), h('th', {}, 'Model'), h('th', {}, 'Tokens')),
        ),
        h('tbody', {}, ...page.data.map((r) => row(r))),
      ),
      h(
        'div',
        { class: 'row' },
        h('button', { type: 'button', class: 'secondary', disabled: offset === 0, onclick: move(offset - PAGE_SIZE) }, 'Previous page'),
        h('button', { type: 'button', class: 'secondary', disabled: !page.has_more, onclick: move(offset + PAGE_SIZE) }, 'Next page'),
      ),
    );
  }

  function row(r: RequestLogEntry): HTMLElement {
    const who = h('td', { class: 'who' }, r.auth_method ?? 'anonymous');
    if (r.user_id) who.append(h('div', {}, h('button', { type: 'button', class: 'link', 'aria-label': `Only user ${r.user_id}`, onclick: () => only(userId, r.user_id!) }, r.user_id)));
    if (r.key_id) who.append(h('div', {}, h('button', { type: 'button', class: 'link', 'aria-label': `Only key ${r.key_id}`, onclick: () => only(keyId, r.key_id!) }, r.key_id)));
    return h(
      'tr',
      { 'data-request-id': r.id },
      h('td', {}, formatDate(r.created_at)),
      h('td', {}, h('code', { class: 'request-id' }, r.id), h('div', { class: 'path' }, `${r.method} ${r.path}`), r.route && r.route !== r.path ? h('div', { class: 'badge' }, r.route) : null),
      h('td', { class: 'status' }, String(r.status), r.aborted ? h('div', { class: 'badge' }, 'client left early') : null),
      h('td', { class: 'duration' }, `${Math.round(r.duration_ms)} ms`),
      who,
      h('td', { class: 'model' }, r.model ?? '—', r.provider_id ? h('div', { class: 'badge' }, r.provider_id) : null),
      h('td', { class: 'tokens' }, r.total_tokens === null ? '—' : `${r.prompt_tokens ?? 0} + ${r.completion_tokens ?? 0} = ${r.total_tokens}`),
    );
  }

  void refresh();
}
