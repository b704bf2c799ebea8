import { del, get, getAll, patch, post } from '../api.js';
import { h } from '../dom.js';
import type { List } from '../session.js';
import { attempt, formatDate, labelled, submitting, truncatedNote } from '../ui.js';

interface Webhook {
  id: string;
  url: string;
  events: string[];
  active: boolean;
  created_at: number;
  previous_secret_expires_at: number | null;
  secret?: string;
}
interface Attempt {
  attempt: number;
  outcome: string;
  status_code: number | null;
  duration_ms: number | null;
  error: string | null;
  /** Unix seconds. */
  attempted_at: number;
}
interface Delivery {
  id: string;
  event_type: string;
  status: string;
  attempt_count: number;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  attempts: Attempt[];
}

const DELIVERIES_PAGE = 20;
const EVENT_HINT = 'conversation.*, message.*, model.*, mcp_tool.* or *';

/**
 * Admins: subscribe URLs to events (the signing secret is shown once), rotate the secret, send a
 * test event, and follow deliveries with their attempts (redeliver a finished one).
 */
export function webhooksPage(root: HTMLElement) {
  const url = h('input', { name: 'url', type: 'url', required: true, autocomplete: 'off', placeholder: 'https://hooks.example.com/platform' });
  const events = h('input', { name: 'events', required: true, autocomplete: 'off', value: '*', placeholder: EVENT_HINT });
  const status = h('div', {});
  const secretSlot = h('div', {});
  const listSlot = h('div', {});
  const form = h('form', { class: 'card', 'aria-label': 'Create a webhook' }, h('h2', {}, 'Create a webhook'), labelled('URL', url), labelled(`Events (comma-separated: ${EVENT_HINT})`, events), h('button', { type: 'submit' }, 'Create webhook'), status);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = { url: url.value.trim(), events: events.value.split(/[,\s]+/).filter(Boolean) };
    const created = await submitting(form, () => attempt(status, () => post<Webhook>('/v1/admin/webhooks', body)));
    if (!created) return;
    form.reset();
    showSecret(created, 'Signing secret of the new webhook');
    await refresh();
  });
  root.replaceChildren(h('h1', {}, 'Webhooks'), secretSlot, form, h('section', { 'aria-label': 'Webhooks' }, h('h2', {}, 'Subscriptions'), listSlot));

  /** The secret exists only in this element until it is dismissed or the page is left. */
  function showSecret(w: Webhook, title: string) {
    if (!w.secret) return;
    secretSlot.replaceChildren(
      h(
        'div',
        { class: 'card secret-box', role: 'status' },
        h('strong', {}, `${title} (${w.url}): copy it now, it will not be shown again. `),
        h('code', { class: 'secret' }, w.secret),
        h('button', { type: 'button', class: 'secondary', onclick: () => secretSlot.replaceChildren() }, 'I have copied it'),
      ),
    );
  }

  async function refresh() {
    // Every page of the list (bounded), not only the first.
    const hooks = await attempt(listSlot, () => getAll<Webhook>('/v1/admin/webhooks'));
    if (!hooks) return;
    if (!hooks.data.length) return void listSlot.replaceChildren(h('p', {}, 'No webhook yet.'));
    listSlot.replaceChildren(...hooks.data.map(card), truncatedNote(hooks));
  }

  function card(w: Webhook): HTMLElement {
    const slot = h('div', {});
    const deliveries = h('div', { class: 'deliveries' });
    // The list stays on screen while a refresh is in flight (no flicker, and the Refresh button
    // stays where it was); only a failed fetch shows here.
    const deliveriesError = h('div', {});
    const act = (label: string, aria: string, action: () => Promise<unknown>, style = 'secondary') =>
      h('button', { type: 'button', class: style, 'aria-label': aria, onclick: () => void action() }, label);
    const rotate = async () => {
      const rotated = await attempt(slot, () => post<Webhook>(`/v1/admin/webhooks/${encodeURIComponent(w.id)}/rotate-secret`));
      if (rotated) {
        showSecret(rotated, 'New signing secret');
        await refresh();
      }
    };
    const sendTest = async () => {
      if ((await attempt(slot, () => post(`/v1/admin/webhooks/${encodeURIComponent(w.id)}/test`))) !== undefined) await page(0)();
    };
    const toggle = async () => {
      if ((await attempt(slot, () => patch(`/v1/admin/webhooks/${encodeURIComponent(w.id)}`, { active: !w.active }))) !== undefined) await refresh();
    };
    const remove = async () => {
      if ((await attempt(slot, () => del(`/v1/admin/webhooks/${encodeURIComponent(w.id)}`))) !== undefined) await refresh();
    };
    // Deliveries a page at a time, newest first: older ones are reached with "Older deliveries".
    let offset = 0;
    const page = (to: number) => () => {
      offset = Math.max(0, to);
      return showDeliveries();
    };
    async function showDeliveries() {
      const list = await attempt(deliveriesError, () => get<List<Delivery> & { has_more?: boolean; total_count?: number }>(`/v1/admin/webhooks/${encodeURIComponent(w.id)}/deliveries?limit=${DELIVERIES_PAGE}&offset=${offset}`));
      if (!list) return;
      const range = list.data.length ? `${offset + 1}–${offset + list.data.length}${list.total_count !== undefined ? ` of ${list.total_count}` : ''}` : '';
      deliveries.replaceChildren(
        h('h4', {}, 'Deliveries ', act('Refresh', `Refresh deliveries of ${w.url}`, showDeliveries)),
        list.data.length ? deliveryTable(list.data) : h('p', {}, offset ? 'No older delivery.' : 'No delivery yet.'),
        offset || list.has_more
          ? h(
              'div',
              { class: 'row' },
              h('span', { class: 'page-range', 'aria-live': 'polite' }, range),
              h('button', { type: 'button', class: 'secondary', 'aria-label': `Newer deliveries of ${w.url}`, disabled: offset === 0, onclick: page(offset - DELIVERIES_PAGE) }, 'Newer deliveries'),
              h('button', { type: 'button', class: 'secondary', 'aria-label': `Older deliveries of ${w.url}`, disabled: !list.has_more, onclick: page(offset + DELIVERIES_PAGE) }, 'Older deliveries'),
            )
          : '',
      );
    }
    function deliveryTable(rows: Delivery[]): HTMLElement {
      return h(
        'table',
        { class: 'deliveries' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Event'), h('th', {}, 'Status'), h('th', {}, 'Attempts'), h('th', {}, 'Created'), h('th', {}, ''))),
        h(
          'tbody',
          {},
          ...rows.map((d) => {
            const dslot = h('div', {});
            const redeliver = async () => {
              if ((await attempt(dslot, () => post(`/v1/admin/webhooks/${encodeURIComponent(w.id)}/deliveries/${encodeURIComponent(d.id)}/redeliver`))) !== undefined) await showDeliveries();
            };
            return h(
              'tr',
              { 'data-delivery-id': d.id, 'data-status': d.status },
              h('td', {}, d.event_type),
              h('td', {}, d.status, d.last_error ? h('div', { class: 'badge' }, d.last_error) : null),
              h(
                'td',
                {},
                h(
                  'ol',
                  { class: 'attempts' },
                  ...d.attempts.map((a) => h('li', {}, `${a.outcome}${a.status_code ? ` ${a.status_code}` : ''}${a.duration_ms != null ? `, ${a.duration_ms} ms` : ''}${a.error ? `: ${a.error}` : ''} (${new Date(a.attempted_at * 1000).toISOString().replace('T', ' ').slice(0, 19)})`)),
                ),
              ),
              h('td', {}, formatDate(d.created_at)),
              h('td', {}, d.status === 'pending' ? '' : act('Redeliver', `Redeliver ${d.event_type} ${d.id}`, redeliver), dslot),
            );
          }),
        ),
      );
    }
    return h(
      'article',
      { class: 'card webhook', 'data-webhook-id': w.id, 'aria-label': `Webhook ${w.url}` },
      h('h3', {}, w.url),
      h('p', {}, `Events: ${w.events.join(', ')} · ${w.active ? 'active' : 'inactive'} · created ${formatDate(w.created_at)}`, w.previous_secret_expires_at ? ` · previous secret valid until ${formatDate(w.previous_secret_expires_at)}` : ''),
      h(
        'div',
        { class: 'row' },
        act('Send test', `Send a test event to ${w.url}`, sendTest),
        act('Deliveries', `Show deliveries of ${w.url}`, page(0)),
        act('Rotate secret', `Rotate the secret of ${w.url}`, rotate),
        act(w.active ? 'Deactivate' : 'Activate', `${w.active ? 'Deactivate' : 'Activate'} ${w.url}`, toggle),
        act('Delete', `Delete ${w.url}`, remove, 'danger'),
      ),
      slot,
      deliveriesError,
      deliveries,
    );
  }

  void refresh();
}
