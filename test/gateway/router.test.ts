import test from 'ava';
import { serviceTarget, parseDeck } from '../../services/gateway/deck.js';
import { createRouter, normalizePath } from '../../services/gateway/router.js';
import { loadTestDeck } from './deck-fixture.js';

const deck = loadTestDeck();
const targets = new Map((deck.services ?? []).map((s) => [s.name, serviceTarget(s).path]));
const router = createRouter(deck, (s) => targets.get(s.name)!);

// The expected route of every path deck/kong.yaml serves, and of the near-misses around them.
const TABLE: Array<[method: string, path: string, route: string | null, upstream?: string]> = [
  ['POST', '/v1/chat/completions', 'llm-api-v1'],
  ['POST', '/llm/v1/chat/completions', 'llm-api-v1'],
  ['GET', '/v1/models', 'llm-api-v1'],
  ['GET', '/v1/models/catalogs/org/model-name', 'llm-api-v1'],
  ['GET', '/llm/v1/conversations/conv_1/items', 'llm-api-v1'],
  ['GET', '/v1', 'llm-api-v1'],
  ['POST', '/v1/responses', 'response-api-responses'],
  ['GET', '/v1/responses/resp_1', 'response-api-responses'],
  ['POST', '/llm/v1/responses', 'response-api-responses'],
  ['GET', '/llm/v1/responses/resp_1/input_items', 'response-api-responses'],
  ['POST', '/v1/media/upload', 'media-api-media'],
  ['POST', '/v1/mcp', 'mcp-tools-mcp'],
  ['POST', '/auth/api-keys', 'llm-api-auth'],
  ['DELETE', '/auth/api-keys/key_1', 'llm-api-auth'],
  ['POST', '/auth/upgrade', 'llm-api-auth'],
  ['POST', '/llm/auth/guest-login', 'llm-api-guest-login'],
  ['POST', '/llm/auth/refresh', 'llm-api-refresh'],
  ['POST', '/llm/auth/refresh-token', 'llm-api-refresh'],
  ['POST', '/auth/guest-login', 'llm-api-guest-login'],
  ['POST', '/llm/auth/login', 'llm-api-login'],
  ['POST', '/auth/login', 'llm-api-login'],
  ['POST', '/auth/password', 'llm-api-auth'],
  // The old validator path is an ordinary authenticated auth path now; the validator lives under /internal/.
  ['POST', '/auth/validate-api-key', 'llm-api-auth'],
  ['POST', '/internal/auth/validate-api-key', 'internal-blocked'],
  ['POST', '/llm/internal/auth/validate-api-key', 'internal-blocked'],
  ['POST', '/INTERNAL/auth/validate-api-key', 'internal-blocked'],
  ['POST', '/Internal', 'internal-blocked'],
  ['GET', '/openapi.json', 'llm-api-openapi'],
  ['GET', '/readyz', 'edge-readyz'],
  ['GET', '/.well-known/jwks.json', 'llm-api-well-known'],
  ['GET', '/.well-known/openid-configuration', 'llm-api-well-known'],
  ['GET', '/healthz', 'edge-healthz'],
  // near-misses
  ['GET', '/llmx/v1/models', null],
  ['GET', '/v1x/models', null],
  ['GET', '/v10/models', null],
  ['POST', '/v1/responsesx', 'llm-api-v1'],
  ['POST', '/v1/mcpx', 'llm-api-v1'],
  ['POST', '/llm/v1/responsesx', 'llm-api-v1'],
  ['POST', '/auth/guest-login/extra', 'llm-api-auth'],
  ['POST', '/auth/login/extra', 'llm-api-auth'],
  ['POST', '/auth/loginx', 'llm-api-auth'],
  ['POST', '/authx', null],
  ['POST', '/healthz', null],
  ['GET', '/healthzx', null],
  ['GET', '/', null],
  ['GET', '/llm', null],
  // normalisation: repeated slashes merge, dot segments resolve, %2F stays encoded
  ['GET', '//v1/models', 'llm-api-v1', '/v1/models'],
  ['GET', '/v1//models', 'llm-api-v1', '/v1/models'],
  ['GET', '/x/../v1/models', 'llm-api-v1', '/v1/models'],
  ['GET', '/%76%31/models', 'llm-api-v1', '/v1/models'],
  ['GET', '/v1%2Fmodels', null],
  ['GET', '/llm%2Fv1/models', null],
  ['POST', '/v1%2Fresponses', null],
  ['GET', '/auth%2Fvalidate-api-key', null],
  ['POST', '/%69nternal/auth/validate-api-key', 'internal-blocked', '/internal/auth/validate-api-key'],
  ['POST', '//internal/auth/validate-api-key', 'internal-blocked', '/internal/auth/validate-api-key'],
  ['POST', '/v1/../internal/auth/validate-api-key', 'internal-blocked', '/internal/auth/validate-api-key'],
  ['POST', '/internalx', null],
];

for (const [method, path, expected, upstream] of TABLE) {
  test(`${method} ${path} → ${expected ?? 'no route'}`, (t) => {
    const match = router.match(method, path);
    t.is(match?.route.name ?? null, expected);
    if (match) t.is(match.upstreamPath, upstream ?? path, 'strip_path false forwards the normalised path');
  });
}

test('normalizePath keeps reserved encodings and upper-cases them', (t) => {
  t.is(normalizePath('/a%2fb'), '/a%2Fb');
  t.is(normalizePath('/a/./b/../c'), '/a/c');
  t.is(normalizePath('relative'), null);
});

// strip_path, priorities and methods as Kong evaluates them, on a synthetic file.
const synthetic = parseDeck(
  `
_format_version: "3.0"
services:
  - name: s1
    url: http://127.0.0.1:1/base
    routes:
      - { name: prefix-short, paths: [/api], strip_path: true }
      - { name: prefix-long, paths: [/api/v2], strip_path: true }
      - { name: regex-low, paths: ['~/api/v\\d+/items'], regex_priority: 1, strip_path: true }
      - { name: regex-high, paths: ['~/api/v\\d+/items/special'], regex_priority: 5, strip_path: false }
      - { name: with-method, paths: [/api], methods: [DELETE], strip_path: false }
  - name: s2
    url: http://127.0.0.1:1/
    routes:
      - { name: root-strip, paths: [/svc], strip_path: true }
`,
  {},
);
const paths = new Map((synthetic.services ?? []).map((s) => [s.name, serviceTarget(s).path]));
const synthRouter = createRouter(synthetic, (s) => paths.get(s.name)!);

const SYNTH: Array<[string, string, string | null, string?]> = [
  ['GET', '/api/v1/items/special/1', 'regex-high', '/base/api/v1/items/special/1'],
  ['GET', '/api/v2/items/1', 'regex-low', '/base/1'],
  ['GET', '/api/v2/other', 'prefix-long', '/base/other'],
  ['GET', '/api/v3/other', 'prefix-short', '/base/v3/other'],
  ['GET', '/api', 'prefix-short', '/base'],
  ['GET', '/apix', 'prefix-short', '/basex'],
  ['DELETE', '/api/v2/items/1', 'with-method', '/base/api/v2/items/1'],
  ['GET', '/svc/a/b', 'root-strip', '/a/b'],
  ['GET', '/svc', 'root-strip', '/'],
  ['GET', '/nothing', null],
];
for (const [method, path, expected, upstream] of SYNTH) {
  test(`synthetic: ${method} ${path} → ${expected ?? 'no route'}`, (t) => {
    const match = synthRouter.match(method, path);
    t.is(match?.route.name ?? null, expected);
    if (match) t.is(match.upstreamPath, upstream!);
  });
}
