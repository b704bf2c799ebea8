import test from 'ava';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { tokenLifetimeRefusals } from '../../services/platform/config.js';

// `npm start` refuses token lifetimes its own edge would refuse: the edge rejects a token whose
// exp − iat is above its maximum, and the embedded issuer signs exp = iat + TTL.
const refusals = (env: Record<string, string>) => tokenLifetimeRefusals(loadBaseConfig(env));

test('the defaults (900 s, guests 300 s, edge 3600 s) and a TTL equal to the maximum start', (t) => {
  t.deepEqual(refusals({}), []);
  t.deepEqual(refusals({ EDGE_JWT_MAX_LIFETIME_SECONDS: '900' }), []);
  t.deepEqual(refusals({ EDGE_JWT_MAX_LIFETIME_SECONDS: '600', ACCESS_TOKEN_TTL_SECONDS: '600', GUEST_ACCESS_TOKEN_TTL_SECONDS: '600' }), []);
});

test('an edge maximum below ACCESS_TOKEN_TTL_SECONDS is one line naming both settings', (t) => {
  const lines = refusals({ EDGE_JWT_MAX_LIFETIME_SECONDS: '899' });
  t.is(lines.length, 1);
  t.true(lines[0]!.startsWith('refusing to start: ACCESS_TOKEN_TTL_SECONDS=900 is above EDGE_JWT_MAX_LIFETIME_SECONDS=899'), lines[0]);
  t.regex(lines[0]!, /lower ACCESS_TOKEN_TTL_SECONDS to at most 899 or raise EDGE_JWT_MAX_LIFETIME_SECONDS$/);
});

test('the guest TTL counts too, and both together stay one line', (t) => {
  const guest = refusals({ EDGE_JWT_MAX_LIFETIME_SECONDS: '1000', GUEST_ACCESS_TOKEN_TTL_SECONDS: '1200' });
  t.is(guest.length, 1);
  t.true(guest[0]!.includes('GUEST_ACCESS_TOKEN_TTL_SECONDS=1200 is above EDGE_JWT_MAX_LIFETIME_SECONDS=1000'), guest[0]);
  t.false(guest[0]!.includes('ACCESS_TOKEN_TTL_SECONDS=900'), guest[0]);
  const both = refusals({ EDGE_JWT_MAX_LIFETIME_SECONDS: '120' });
  t.is(both.length, 1);
  t.true(both[0]!.includes('ACCESS_TOKEN_TTL_SECONDS=900 and GUEST_ACCESS_TOKEN_TTL_SECONDS=300 are above EDGE_JWT_MAX_LIFETIME_SECONDS=120'), both[0]);
});

test('DECK_JWT_MAX_LIFETIME_SECONDS, which wins over the edge setting, is the maximum checked and named', (t) => {
  const lines = refusals({ DECK_JWT_MAX_LIFETIME_SECONDS: '600' });
  t.is(lines.length, 1);
  t.true(lines[0]!.includes('ACCESS_TOKEN_TTL_SECONDS=900 is above DECK_JWT_MAX_LIFETIME_SECONDS=600'), lines[0]);
  t.deepEqual(refusals({ DECK_JWT_MAX_LIFETIME_SECONDS: '3600', EDGE_JWT_MAX_LIFETIME_SECONDS: '600' }), []);
});

test('with the Keycloak driver the embedded TTLs issue no token and are not checked', (t) => {
  const keycloak = { KEYCLOAK_URL: 'https://sso.example.com', KEYCLOAK_REALM: 'r', KEYCLOAK_CLIENT_ID: 'c', KEYCLOAK_CLIENT_SECRET: 's' };
  t.deepEqual(refusals({ ...keycloak, EDGE_JWT_MAX_LIFETIME_SECONDS: '60' }), []);
});
