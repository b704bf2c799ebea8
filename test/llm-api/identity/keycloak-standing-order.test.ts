import test from 'ava';
import nock from 'nock';
import { createLogger, ManualClock } from '../../../services/kit/index.js';
import { createKeycloakProvider, USER_RECHECK_MS } from '../../../services/llm-api/identity/providers/keycloak.js';
import type { UserStanding } from '../../../services/llm-api/identity/providers/types.js';
import type { IdentityUsersStore, UserRecord } from '../../../services/llm-api/identity/store.js';
import { waitFor } from '../../helpers/wait.js';

// The realm's answer on a user (still enabled?) is re-read in the background while a key is in use.
// A read that began before an administrator disabled or re-enabled the user through this API must
// not, finishing later, put its older answer back over the one the change stored. Keycloak is nock
// answering its documented admin REST API (GET/PUT users/{id}, POST users/{id}/logout).
const KC = 'http://keycloak-standing-order.test:8085';
const REALM = 'jan';
const ADMIN = `/admin/realms/${REALM}`;
const TOKEN_PATH = `/realms/${REALM}/protocol/openid-connect/token`;
const settings = { url: KC, realm: REALM, clientId: 'backend', clientSecret: 'backend-secret', timeoutMs: 5000 };
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };

test.before(() => nock.disableNetConnect());
test.after.always(() => {
  nock.cleanAll();
  nock.enableNetConnect();
});
test.afterEach.always(() => nock.cleanAll());

function setup(kcId: string) {
  const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
  nock(KC).persist().post(TOKEN_PATH).reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });
  const provider = createKeycloakProvider({
    settings,
    clock,
    // Only refresh reads the platform's users; the standing and setEnabled never do.
    users: {} as IdentityUsersStore,
    logger: createLogger({ level: 'silent', name: 'keycloak-standing-order' }),
  });
  const user = { id: 'user_ORDER', issuer: 'external', subject: kcId } as UserRecord;
  /** setEnabled as the realm answers it: GET the user, PUT it back, and on a disable end its sessions. */
  const setEnabled = async (enabled: boolean) => {
    nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, { id: kcId, enabled: !enabled }).put(`${ADMIN}/users/${kcId}`).reply(204);
    if (!enabled) nock(KC, asAdmin).post(`${ADMIN}/users/${kcId}/logout`).reply(204);
    await provider.setEnabled(user, enabled);
  };
  return { clock, provider, user, setEnabled };
}

/**
 * The platform stored the opposite of `after` (through setEnabled) an interval ago; a validation
 * then starts the realm's read of the user, which answers what the realm said before the change and
 * is held; the administrator's change (setEnabled) stores `after`; then the read is let through.
 * Answers every standing seen from the change until a next read starts, which happens only once the
 * held one has ended.
 */
async function heldReadAcross(kcId: string, after: UserStanding) {
  const { clock, provider, user, setEnabled } = setup(kcId);
  await setEnabled(after !== 'active');
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let asked = 0;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(async () => {
      asked++;
      await held;
      return [200, { id: kcId, enabled: after !== 'active' }];
    });
  // The answer ages past the interval: the next validation gets it and starts a read in the background.
  clock.advance(USER_RECHECK_MS);
  if (provider.standing(user) !== (after === 'active' ? 'disabled' : 'active')) throw new Error('the seeded answer does not stand');
  await waitFor(() => asked === 1, 10_000, 'the realm asked');

  await setEnabled(after === 'active');
  const seen: UserStanding[] = [await provider.standing(user)];
  // The change's answer ages too (still within the second interval): it stands while reads run.
  clock.advance(USER_RECHECK_MS);
  release();

  // The held read ends; only then does a validation start the next read, whose answer is the realm's now.
  let next = 0;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, () => (next++, { id: kcId, enabled: after === 'active' }));
  await waitFor(
    async () => {
      const standing = await provider.standing(user);
      seen.push(standing);
      return next === 1 || standing !== after;
    },
    10_000,
    'the held read ended',
  );
  return seen;
}

test.serial('a realm read that started before a disable through this API does not put "enabled" back after it', async (t) => {
  const seen = await heldReadAcross('d0000000-0000-4000-8000-000000000001', 'disabled');
  t.deepEqual(seen, seen.map(() => 'disabled'), `standings seen after the disable: ${seen.join(', ')}`);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a realm read that started before a re-enable through this API does not refuse the user again after it', async (t) => {
  const seen = await heldReadAcross('d0000000-0000-4000-8000-000000000002', 'active');
  t.deepEqual(seen, seen.map(() => 'active'), `standings seen after the re-enable: ${seen.join(', ')}`);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});
