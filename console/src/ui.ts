import { ApiError } from './api.js';
import { h } from './dom.js';

/** An API error shown in place: its message, the offending field and the request id to quote. */
export function errorBox(error: unknown): HTMLElement {
  if (error instanceof ApiError) {
    return h(
      'div',
      { class: 'error', role: 'alert' },
      h('strong', {}, `Error ${error.status}: `),
      error.message,
      error.param ? h('span', {}, ` (field: ${error.param})`) : null,
      error.retryAfter !== null ? h('span', { class: 'retry-after' }, ` Try again in ${error.retryAfter} s.`) : null,
      error.requestId ? h('div', { class: 'request-id' }, 'Request id: ', h('code', { 'data-request-id': error.requestId }, error.requestId)) : null,
    );
  }
  return h('div', { class: 'error', role: 'alert' }, error instanceof Error ? error.message : String(error));
}

/**
 * Runs `action`, then replaces `slot`'s content with the error (or nothing) so failures show where
 * they happened. The slot is cleared when the action ends, not when it starts: a list refreshed
 * through its own slot stays on screen until its replacement arrives, with no empty flash between.
 */
export async function attempt<T>(slot: HTMLElement, action: () => Promise<T>): Promise<T | undefined> {
  try {
    const result = await action();
    slot.replaceChildren();
    return result;
  } catch (error) {
    slot.replaceChildren(errorBox(error));
    return undefined;
  }
}

/**
 * Runs a form's action with its submit buttons disabled until it ends, so a double click or a
 * second Enter sends it once: a key or webhook created twice would leave a secret never shown.
 */
export async function submitting<T>(form: HTMLFormElement, action: () => Promise<T>): Promise<T> {
  const buttons = [...form.querySelectorAll<HTMLButtonElement>('button[type=submit]')];
  for (const button of buttons) button.disabled = true;
  try {
    return await action();
  } finally {
    for (const button of buttons) button.disabled = false;
  }
}

export function labelled(label: string, control: HTMLElement): HTMLElement {
  const id = control.id || `f_${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), control);
}

export function formatDate(seconds: number | null | undefined): string {
  return seconds ? new Date(seconds * 1000).toISOString().replace('T', ' ').slice(0, 16) : '—';
}

/** A line under a list that the console's bound on pages stopped before its end (empty otherwise). */
export function truncatedNote(list: { data: unknown[]; truncated: boolean; total: number }): HTMLElement | string {
  return list.truncated ? h('p', { class: 'badge' }, `Showing the first ${list.data.length} of ${list.total}.`) : '';
}
