import { ApiError, clearCredential, credential, get, onAdminRefused, onCredentialRefused, setCredential, signInWithPassword, signOutCredential, type Credential } from './api.js';
import { h } from './dom.js';
import { catalogPage } from './pages/catalog.js';
import { keysPage } from './pages/keys.js';
import { mcpToolsPage } from './pages/mcp-tools.js';
import { playgroundPage } from './pages/playground.js';
import { providersPage } from './pages/providers.js';
import { requestsPage } from './pages/requests.js';
import { usagePage } from './pages/usage.js';
import { usersPage } from './pages/users.js';
import { webhooksPage } from './pages/webhooks.js';
import type { Me } from './session.js';
import { attempt, errorBox, labelled } from './ui.js';

interface Page {
  path: string;
  title: string;
  adminOnly: boolean;
  /** `left` is aborted when the operator leaves the page (another page, sign-out, a session ended): what it still runs stops. */
  render(root: HTMLElement, me: Me, left: AbortSignal): void;
}

/** The pages, in menu order. Admin pages are neither listed nor rendered for other users (the API refuses them anyway). */
const PAGES: Page[] = [
  { path: 'playground', title: 'Playground', adminOnly: false, render: playgroundPage },
  { path: 'keys', title: 'API keys', adminOnly: false, render: keysPage },
  { path: 'usage', title: 'Usage', adminOnly: false, render: usagePage },
  { path: 'providers', title: 'Providers and models', adminOnly: true, render: providersPage },
  { path: 'catalog', title: 'Catalog', adminOnly: true, render: catalogPage },
  { path: 'users', title: 'Users', adminOnly: true, render: usersPage },
  { path: 'webhooks', title: 'Webhooks', adminOnly: true, render: webhooksPage },
  { path: 'mcp-tools', title: 'MCP tools', adminOnly: true, render: mcpToolsPage },
  { path: 'requests', title: 'Recent requests', adminOnly: true, render: requestsPage },
];

const app = document.getElementById('app')!;
let me: Me | null = null;

// The page on screen's lifetime: aborted when another page replaces it or the session ends, so a
// playground stream does not run on (and get stored) behind a page the operator left.
let pageLife: AbortController | null = null;
function leavePage(): AbortSignal {
  pageLife?.abort();
  pageLife = new AbortController();
  return pageLife.signal;
}

/**
 * Sets the credential and asks the API who it belongs to; on failure the error is shown in `slot`
 * and nothing is kept: a token pair is also ended at the API (`signOutCredential`, best effort),
 * so a refresh token that nobody holds any more does not stay valid until it expires.
 */
async function enter(value: Credential, slot: HTMLElement) {
  setCredential(value);
  const user = await attempt(slot, () => get<Me>('/auth/me'));
  if (!user) return void signOutCredential();
  me = user;
  render();
}

/** Why the sign-in page is shown again, when it is not a sign-out (shown above the forms). */
const SESSION_ENDED = 'Your session has ended: the API no longer accepts this credential (it expired, was revoked or was signed out elsewhere). Sign in again.';

function signInView(notice?: string) {
  leavePage();
  const key = h('input', { name: 'api_key', type: 'password', required: true, autocomplete: 'off', spellcheck: 'false' });
  const keySlot = h('div', {});
  const keyForm = h(
    'form',
    { class: 'card sign-in', 'aria-label': 'Key sign-in' },
    h('h2', {}, 'With an API key'),
    h('p', {}, 'Paste an API key (sk_…).'),
    labelled('API key', key),
    h('button', { type: 'submit' }, 'Sign in'),
    keySlot,
  );
  keyForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = key.value.trim();
    key.value = '';
    await enter({ kind: 'api_key', key: value }, keySlot);
  });

  const email = h('input', { name: 'email', type: 'email', required: true, autocomplete: 'username', spellcheck: 'false' });
  const password = h('input', { name: 'password', type: 'password', required: true, autocomplete: 'current-password' });
  const passwordSlot = h('div', {});
  const passwordForm = h(
    'form',
    { class: 'card sign-in', 'aria-label': 'Password sign-in' },
    h('h2', {}, 'With e-mail and password'),
    h('p', {}, 'For accounts of the platform’s own sign-in.'),
    labelled('E-mail', email),
    labelled('Password', password),
    h('button', { type: 'submit' }, 'Sign in with password'),
    passwordSlot,
  );
  const passwordSubmit = passwordForm.querySelector('button')!;
  passwordForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    // One sign-in at a time; and a password typed while the answer was on its way is not wiped by it.
    passwordSubmit.disabled = true;
    const submitted = password.value;
    // A wrong password (401), a locked address (429) or a platform without this sign-in (400) is shown here.
    const pair = await attempt(passwordSlot, () => signInWithPassword(email.value.trim(), submitted));
    passwordSubmit.disabled = false;
    if (password.value === submitted) password.value = '';
    if (pair) await enter({ kind: 'token', access: pair.access_token, refresh: pair.refresh_token }, passwordSlot);
  });

  app.replaceChildren(
    h(
      'main',
      { id: 'main', class: 'sign-in-page' },
      h('h1', {}, 'Sign in to the console'),
      notice ? h('p', { class: 'error', role: 'alert' }, notice) : null,
      h('p', {}, 'Your credential is kept in this tab only and cleared when you sign out or close the tab.'),
      h('div', { class: 'sign-in-choices' }, keyForm, passwordForm),
    ),
  );
  key.focus();
}

function signOut() {
  void signOutCredential();
  me = null;
  history.replaceState(null, '', '#/');
  signInView();
}

function skipToContent(event: Event) {
  event.preventDefault();
  document.getElementById('main')?.focus();
}

/** Draws the menu and the page the address names; `notice` (a change of rights) is shown above the page. */
function render(notice?: string) {
  if (!me) return signInView();
  const left = leavePage();
  const user = me;
  const visible = PAGES.filter((p) => !p.adminOnly || user.is_admin);
  const wanted = location.hash.replace(/^#\/?/, '');
  const page = visible.find((p) => p.path === wanted) ?? (wanted ? undefined : visible[0]!);
  const main = h('main', { id: 'main', tabindex: '-1' });
  const nav = h(
    'nav',
    { 'aria-label': 'Console' },
    h('ul', {}, ...visible.map((p) => h('li', {}, h('a', { href: `#/${p.path}`, 'aria-current': p === page ? 'page' : undefined }, p.title)))),
  );
  const header = h(
    'header',
    {},
    // Focus moves without touching the address: `#main` would be read as a page path (hashchange)
    // and replace the page with "Page not found".
    h('a', { class: 'skip', href: '#main', onclick: skipToContent }, 'Skip to content'),
    h('span', { class: 'brand' }, 'AI Gateway console'),
    nav,
    // A guest's e-mail is a placeholder: guests are named by their username.
    h('span', { class: 'who' }, (user.is_guest ? user.username : user.email ?? user.username) ?? user.id, user.is_admin ? ' (admin)' : ''),
    h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out'),
  );
  app.replaceChildren(header, ...(notice ? [h('p', { class: 'notice', role: 'status' }, notice)] : []), main);
  if (page) page.render(main, user, left);
  else main.replaceChildren(h('h1', {}, 'Page not found'), h('p', {}, 'This page does not exist or is not available to your account.'));
}

window.addEventListener('hashchange', () => me && render());

// A credential the API refuses while signed in (a key revoked, a session expired or ended
// elsewhere) ends the console's session: it is forgotten and the sign-in page says why, instead of
// every page showing 401 errors. The address is kept, so signing in again returns to the same page.
// (While signing in, `me` is null and the refusal is shown in the sign-in form instead.)
onCredentialRefused(() => {
  if (!me) return;
  me = null;
  clearCredential();
  signInView(SESSION_ENDED);
});

/**
 * An administrator endpoint answered 403 while the console shows admin pages: the user may have
 * been demoted since signing in. `/auth/me` is asked once (one question at a time, however many
 * calls were refused together); when it no longer says admin, the menu and the page are drawn
 * again from its answer. When it still says admin nothing is redrawn (the 403 stays in place), so
 * a page that is refused for another reason does not loop.
 */
let recheck: Promise<void> | null = null;
onAdminRefused(() => {
  const held = me;
  if (!held?.is_admin || recheck) return;
  recheck = (async () => {
    try {
      const fresh = await get<Me>('/auth/me');
      if (me === held && !fresh.is_admin) {
        me = fresh;
        render('Your account is no longer an administrator: the admin pages are no longer available.');
      }
    } catch {
      /* the page shows its own error; a refused credential ends the session by itself */
    } finally {
      recheck = null;
    }
  })();
});

/**
 * A tab reopened with a credential: asks the API who it belongs to. Only a refusal of the
 * credential (401) forgets it; an API that is down or busy (a network error, 5xx, 429) shows its
 * error with *Try again*, and the credential is kept.
 */
async function resume() {
  app.replaceChildren(h('main', { id: 'main', class: 'sign-in-page' }, h('h1', {}, 'AI Gateway console'), h('p', { role: 'status' }, 'Checking your sign-in…')));
  try {
    me = await get<Me>('/auth/me');
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      clearCredential();
      return signInView(SESSION_ENDED);
    }
    app.replaceChildren(
      h(
        'main',
        { id: 'main', class: 'sign-in-page' },
        h('h1', {}, 'AI Gateway console'),
        h('p', {}, 'The API could not confirm your sign-in. You are still signed in in this tab.'),
        errorBox(error),
        h('div', { class: 'row' }, h('button', { type: 'button', onclick: () => void resume() }, 'Try again'), h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out')),
      ),
    );
    return;
  }
  render();
}

if (credential()) void resume();
else signInView();
