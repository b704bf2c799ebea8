import { get, getAll, post, streamChat } from '../api.js';
import { h } from '../dom.js';
import type { List, Me } from '../session.js';
import { attempt, errorBox, labelled } from '../ui.js';

interface Model {
  id: string;
  model_display_name?: string;
  owned_by?: string;
}
interface Conversation {
  id: string;
  title: string | null;
  active_branch?: string;
  updated_at: number;
}
interface Item {
  id: string;
  type: string;
  role?: string;
  status?: string;
  content?: unknown;
}
interface ItemPage extends List<Item> {
  total_count?: number;
}
interface Branch {
  name: string;
  parent_branch: string | null;
  forked_from_item_id: string | null;
  item_count: number;
  is_active: boolean;
}
interface BranchList extends List<Branch> {
  active_branch: string;
}
type State = 'idle' | 'streaming' | 'saving' | 'done' | 'stopped' | 'error';

const ITEMS_SHOWN = 100;
const CONVERSATIONS_PAGE = 20;

/** The text of a stored message's content (a string, or parts with `text`). */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part: { text?: unknown } | null) => (typeof part?.text === 'string' ? part.text : '')).join('');
}

const isMessage = (item: Item) => item.type === 'message' && (item.role === 'user' || item.role === 'assistant' || item.role === 'system');

/**
 * Every user: pick a model from /v1/models and chat with streaming output rendered as it arrives.
 * Chats are stored (`store: true`): the conversations API keeps the history, lists the
 * conversations, and turns an edit or a regenerate into a new `MAIN` branch with the previous one
 * kept as a backup; the branches are shown as a tree and any of them can be opened.
 * `left` ends with the page (another page opened, sign-out, a session ended): a stream still
 * running is aborted, as *Stop* would, and nothing more is asked for this page.
 */
export function playgroundPage(root: HTMLElement, _me: Me, left: AbortSignal) {
  const picker = h('select', { name: 'model' });
  const pickerSlot = h('div', {});
  const notice = h('div', {});
  const transcript = h('div', { class: 'transcript', 'aria-live': 'polite', 'aria-label': 'Conversation' });
  const input = h('textarea', { name: 'message', rows: '3', required: true });
  const send = h('button', { type: 'submit' }, 'Send');
  const stop = h('button', { type: 'button', class: 'secondary', disabled: true }, 'Stop');
  const state = h('p', { class: 'state', role: 'status', 'data-state': 'idle' }, '');
  const form = h('form', { class: 'composer', 'aria-label': 'Send a message' }, labelled('Message', input), h('div', { class: 'row' }, send, stop), state);
  const newChat = h('button', { type: 'button', class: 'secondary' }, 'New chat');
  const listSlot = h('div', {});
  const branchSlot = h('div', {});
  let controller: AbortController | null = null;
  let conversationId: string | null = null;
  let itemCount = 0;
  // How many conversations the side panel lists (most recently active first); "More conversations" adds a page.
  let conversationsShown = CONVERSATIONS_PAGE;

  root.replaceChildren(
    h('h1', {}, 'Playground'),
    h(
      'div',
      { class: 'playground' },
      h('aside', { 'aria-label': 'Conversations' }, h('h2', {}, 'Conversations'), newChat, listSlot, branchSlot),
      h('section', { class: 'chat', 'aria-label': 'Chat' }, h('div', { class: 'card' }, labelled('Model', picker), pickerSlot), notice, transcript, form),
    ),
  );

  const setState = (name: State, text: string) => {
    state.dataset.state = name;
    state.textContent = text;
    const busy = name === 'streaming' || name === 'saving';
    send.disabled = busy;
    stop.disabled = name !== 'streaming';
    for (const button of root.querySelectorAll<HTMLButtonElement>('.message button, aside button')) button.disabled = busy || button.getAttribute('aria-pressed') === 'true';
  };

  stop.addEventListener('click', () => controller?.abort());
  left.addEventListener('abort', () => controller?.abort(), { once: true });
  newChat.addEventListener('click', () => {
    controller?.abort();
    conversationId = null;
    itemCount = 0;
    transcript.replaceChildren();
    branchSlot.replaceChildren();
    setState('idle', '');
    void refreshList();
  });

  const userBubble = (text: string) => h('div', { class: 'message user' }, h('span', { class: 'who' }, 'You'), h('div', { class: 'content' }, text));
  const assistantBubble = (who: string) => {
    const content = h('div', { class: 'content' });
    return { bubble: h('div', { class: 'message assistant' }, h('span', { class: 'who' }, who), content), content };
  };

  /**
   * Streams one answer into a new bubble. Returns the text received and how it ended; an error is
   * shown in the bubble with its request id.
   */
  async function streamAnswer(body: Record<string, unknown>): Promise<{ text: string; ended: 'done' | 'stopped' | 'error' }> {
    const { bubble, content } = assistantBubble(picker.value);
    transcript.append(bubble);
    controller = new AbortController();
    if (left.aborted) controller.abort();
    setState('streaming', 'Streaming…');
    let text = '';
    try {
      // Each delta is appended as a text node the moment it arrives.
      await streamChat(
        { model: picker.value, ...body },
        (delta) => {
          text += delta;
          content.append(document.createTextNode(delta));
        },
        controller.signal,
        (ref) => {
          conversationId = ref.id;
        },
      );
      return { text, ended: 'done' };
    } catch (error) {
      if (controller.signal.aborted) return { text, ended: 'stopped' };
      bubble.append(errorBox(error));
      setState('error', 'Failed');
      return { text, ended: 'error' };
    } finally {
      controller = null;
    }
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || !picker.value) return;
    input.value = '';
    transcript.append(userBubble(text));
    // The API keeps the history: only the new message is sent, with the conversation to append to.
    const body: Record<string, unknown> = { store: true, messages: [{ role: 'user', content: text }] };
    if (conversationId) body.conversation = conversationId;
    const expected = itemCount + 2;
    const { ended } = await streamAnswer(body);
    if (ended === 'error' || left.aborted) return;
    await settle(ended, expected);
  });

  /** After an answer: wait until the API has stored it, then show the stored conversation. */
  async function settle(ended: 'done' | 'stopped', expected: number) {
    setState('saving', 'Saving…');
    if (conversationId) await sync(expected);
    await refreshList();
    setState(ended, ended === 'done' ? 'Done' : 'Stopped');
  }

  /**
   * Shows the active branch of the open conversation. The API stores a streamed answer as the
   * stream ends, a moment after the last byte reached the page, so with `expected` it asks again
   * (with growing pauses, for up to about 25 s on a busy server) until that many items are there.
   * Should they still be missing, the transcript stays as streamed, with a notice: showing the
   * stored items then would drop the answer the user just read.
   */
  async function sync(expected = 0) {
    if (!conversationId) return;
    const id = conversationId;
    let page: ItemPage | undefined;
    for (let pause = 50; ; pause *= 2) {
      if (left.aborted) return;
      page = await attempt(notice, () => get<ItemPage>(`/v1/conversations/${encodeURIComponent(id)}/items?order=desc&limit=${ITEMS_SHOWN}`));
      if (!page || (page.total_count ?? page.data.length) >= expected) break;
      if (pause > 12_800) {
        if (conversationId === id) notice.replaceChildren(h('p', { class: 'badge' }, 'The answer is not stored yet: reopen the conversation in a moment to see it saved.'));
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
    if (!page || conversationId !== id) return;
    itemCount = page.total_count ?? page.data.length;
    renderItems(page.data.slice().reverse(), itemCount > page.data.length);
    await refreshBranches();
  }

  function renderItems(items: Item[], truncated: boolean) {
    transcript.replaceChildren(
      ...(truncated ? [h('p', { class: 'badge' }, `Earlier messages are not shown (the latest ${ITEMS_SHOWN}).`)] : []),
      ...items.filter(isMessage).map((item) => (item.role === 'user' ? userItem(item) : assistantItem(item))),
    );
  }

  function userItem(item: Item): HTMLElement {
    const text = textOf(item.content);
    const content = h('div', { class: 'content' }, text);
    const edit = h('button', { type: 'button', class: 'secondary small' }, 'Edit');
    const bubble = h('div', { class: 'message user', 'data-item-id': item.id }, h('span', { class: 'who' }, 'You'), content, h('div', { class: 'actions' }, edit));
    edit.addEventListener('click', () => {
      const box = h('textarea', { name: 'edited', rows: '3' });
      box.value = text;
      const slot = h('div', {});
      const editor = h(
        'form',
        { class: 'edit', 'aria-label': 'Edit the message' },
        labelled('Edited message', box),
        h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save and answer'), h('button', { type: 'button', class: 'secondary', onclick: () => editor.replaceWith(content) }, 'Cancel')),
        slot,
      );
      editor.addEventListener('submit', async (event) => {
        event.preventDefault();
        const changed = box.value.trim();
        if (!changed || !conversationId) return;
        // A new MAIN ends with the edited message; the previous MAIN stays as a backup branch.
        setState('saving', 'Editing…');
        const edited = await attempt(slot, () => post(`/v1/conversations/${encodeURIComponent(conversationId!)}/items/${encodeURIComponent(item.id)}/edit`, { content: changed }));
        if (edited !== undefined) await answerBranch();
        else setState('error', 'Failed');
      });
      content.replaceWith(editor);
      box.focus();
    });
    return bubble;
  }

  function assistantItem(item: Item): HTMLElement {
    const slot = h('div', {});
    const regenerate = h('button', { type: 'button', class: 'secondary small' }, 'Regenerate');
    regenerate.addEventListener('click', async () => {
      if (!conversationId) return;
      // A new MAIN ends at the user message this answered; the previous MAIN stays as a backup.
      setState('saving', 'Regenerating…');
      const done = await attempt(slot, () => post(`/v1/conversations/${encodeURIComponent(conversationId!)}/items/${encodeURIComponent(item.id)}/regenerate`));
      if (done !== undefined) await answerBranch();
      else setState('error', 'Failed');
    });
    return h(
      'div',
      { class: 'message assistant', 'data-item-id': item.id },
      h('span', { class: 'who' }, item.status === 'incomplete' ? 'Assistant (stopped)' : 'Assistant'),
      h('div', { class: 'content' }, textOf(item.content)),
      h('div', { class: 'actions' }, regenerate),
      slot,
    );
  }

  /**
   * After an edit or a regenerate the active branch ends with a user message: the model answers
   * the branch's history, and the answer is appended to the branch with the items API.
   */
  async function answerBranch() {
    await sync();
    const id = conversationId!;
    const page = await attempt(notice, () => get<ItemPage>(`/v1/conversations/${encodeURIComponent(id)}/items?order=desc&limit=${ITEMS_SHOWN}`));
    if (!page) return setState('error', 'Failed');
    const messages = page.data
      .slice()
      .reverse()
      .filter(isMessage)
      .map((item) => ({ role: item.role, content: textOf(item.content) }));
    const { text, ended } = await streamAnswer({ messages });
    // A page left mid-answer stores nothing more: the operator did not wait for this answer.
    if (ended === 'error' || left.aborted) return;
    setState('saving', 'Saving…');
    const content = [{ type: 'output_text', text, annotations: [] }];
    await attempt(notice, () => post(`/v1/conversations/${encodeURIComponent(id)}/items`, { items: [{ type: 'message', role: 'assistant', status: ended === 'done' ? 'completed' : 'incomplete', content }] }));
    await sync();
    await refreshList();
    setState(ended, ended === 'done' ? 'Done' : 'Stopped');
  }

  async function refreshList() {
    const list = await attempt(listSlot, () => getAll<Conversation>('/v1/conversations', { pageSize: CONVERSATIONS_PAGE, maxItems: conversationsShown }));
    if (!list) return;
    const more = list.truncated
      ? h(
          'button',
          {
            type: 'button',
            class: 'secondary small',
            onclick: () => {
              conversationsShown += CONVERSATIONS_PAGE;
              void refreshList();
            },
          },
          'More conversations',
        )
      : null;
    if (!list.data.length) return void listSlot.replaceChildren(h('p', { class: 'badge' }, 'No conversation yet.'));
    listSlot.replaceChildren(
      h(
        'ul',
        { class: 'conversations' },
        ...list.data.map((c) =>
          h(
            'li',
            {},
            h(
              'button',
              {
                type: 'button',
                class: 'link',
                'data-conversation-id': c.id,
                'aria-current': c.id === conversationId ? 'true' : undefined,
                onclick: async () => {
                  conversationId = c.id;
                  setState('idle', '');
                  await sync();
                  await refreshList();
                },
              },
              c.title || 'Untitled conversation',
            ),
          ),
        ),
      ),
      ...(more ? [more] : []),
    );
  }

  async function refreshBranches() {
    if (!conversationId) return;
    const id = conversationId;
    const branches = await attempt(branchSlot, () => get<BranchList>(`/v1/conversations/${encodeURIComponent(id)}/branches`));
    if (!branches || conversationId !== id) return;
    const open = async (name: string) => {
      if ((await attempt(branchSlot, () => post(`/v1/conversations/${encodeURIComponent(id)}/branches/${encodeURIComponent(name)}/activate`))) !== undefined) await sync();
    };
    branchSlot.replaceChildren(h('h2', {}, 'Branches'), branchTree(branches.data, open));
  }

  void refreshList();
  void (async () => {
    const models = await attempt(pickerSlot, () => get<List<Model>>('/v1/models'));
    if (!models) return;
    picker.replaceChildren(...models.data.map((m) => h('option', { value: m.id }, m.model_display_name && m.model_display_name !== m.id ? `${m.id} — ${m.model_display_name}` : m.id)));
    if (!models.data.length) pickerSlot.append(h('p', {}, 'No model is available.'));
  })();
}

/** Branches nested under the branch they were forked from; the active one is marked and cannot be re-opened. */
function branchTree(branches: Branch[], open: (name: string) => void): HTMLElement {
  const names = new Set(branches.map((b) => b.name));
  const children = new Map<string | null, Branch[]>();
  for (const b of branches) {
    const parent = b.parent_branch && names.has(b.parent_branch) && b.parent_branch !== b.name ? b.parent_branch : null;
    children.set(parent, [...(children.get(parent) ?? []), b]);
  }
  const seen = new Set<string>();
  const level = (parent: string | null): HTMLElement | null => {
    const list = (children.get(parent) ?? []).filter((b) => !seen.has(b.name));
    if (!list.length) return null;
    for (const b of list) seen.add(b.name);
    return h(
      'ul',
      { class: 'branches' },
      ...list.map((b) =>
        h(
          'li',
          { 'data-branch': b.name, 'data-active': b.is_active ? 'true' : undefined },
          h('button', { type: 'button', class: 'link', 'aria-pressed': b.is_active ? 'true' : 'false', disabled: b.is_active, onclick: () => open(b.name) }, b.name),
          h('span', { class: 'badge' }, ` ${b.item_count} items${b.is_active ? ', active' : ''}`),
          level(b.name),
        ),
      ),
    );
  };
  return level(null) ?? h('p', { class: 'badge' }, 'No branch.');
}
