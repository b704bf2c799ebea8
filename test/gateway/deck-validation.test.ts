import test from 'ava';
import { DeckError, parseDeck, serviceTarget } from '../../services/gateway/deck.js';
import { createRouter } from '../../services/gateway/router.js';
import { startupFailureLine } from '../../services/platform/startup-errors.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';

/** A one-service deck with `routes` (YAML flow entries) and optional extra top-level YAML. */
const deck = (routes: string, extra = '') => `_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    routes:
${routes
  .split('\n')
  .map((line) => `      - ${line}`)
  .join('\n')}
${extra}`;

/** Parses and builds the router, as the edge's start does. */
const load = (text: string) => {
  const parsed = parseDeck(text, {});
  const paths = new Map((parsed.services ?? []).map((s) => [s.name, serviceTarget(s).path]));
  return createRouter(parsed, (s) => paths.get(s.name)!);
};

test('a route whose paths is a string (not a list) stops the start, instead of routing every path', (t) => {
  // Read as a list, "/v1" was the paths "/", "v" and "1": a prefix route matching every request.
  const error = t.throws(() => load(deck('{ name: r, paths: /v1 }')), { instanceOf: DeckError });
  t.is(error?.message, 'deck: route r: paths must be a list');
});

const REFUSED: Array<[title: string, text: string, message: string]> = [
  ['methods given as a string', deck('{ name: r, paths: [/v1], methods: GET }'), 'deck: route r: methods must be a list'],
  ['a route without paths (it would never match here, and match every path on Kong)', deck('{ name: r, methods: [GET] }'), 'route r: paths must list at least one path'],
  ['a path that is neither a prefix nor a regex', deck('{ name: r, paths: [v1] }'), 'route r: paths entry "v1" must start with / (prefix) or ~ (regex)'],
  ['a regex path JavaScript cannot compile', deck("{ name: r, paths: ['~/v1(?<x>'] }"), 'route r: paths entry "~/v1(?<x>" is not a regular expression'],
  ['strip_path that is not a boolean', deck('{ name: r, paths: [/v1], strip_path: "no" }'), 'route r: strip_path must be a boolean'],
  ['regex_priority that is not an integer', deck("{ name: r, paths: ['~/v1'], regex_priority: high }"), 'route r: regex_priority must be an integer'],
  ['two routes of one name', deck('{ name: r, paths: [/a] }\n{ name: r, paths: [/b] }'), 'name "r" is used twice'],
  ['a service url that is not a URL', deck('{ name: r, paths: [/a] }').replace('http://127.0.0.1:1', 'not a url'), 'deck: service s: url is not a valid URL'],
  ['services given as a mapping', '_format_version: "3.0"\nservices:\n  s: { url: "http://127.0.0.1:1" }\n', 'deck: services must be a list'],
  ['top-level routes (decK allows them; the embedded gateway would serve none of them)', deck('{ name: r, paths: [/a] }', 'routes:\n  - { name: top, paths: [/top], service: s }'), 'nest route top under its service'],
  ['a global plugin naming a route that does not exist (it would apply nowhere)', deck('{ name: r, paths: [/a] }', 'plugins:\n  - { name: cors, route: rr, config: {} }'), 'deck: plugin cors: route "rr" names no route of this file'],
  ['a plugin naming a service that does not exist', deck('{ name: r, paths: [/a] }', 'plugins:\n  - { name: cors, service: ss, config: {} }'), 'service "ss" names no service'],
  ['a route\'s plugin naming a consumer that does not exist (it would apply nowhere)', deck('{ name: r, paths: [/a], plugins: [{ name: cors, consumer: cc, config: {} }] }', 'consumers:\n  - { username: c }'), 'deck: route r: plugin cors: consumer "cc" names no consumer of this file'],
  ['a consumer\'s plugin naming a route that does not exist', deck('{ name: r, paths: [/a] }', 'consumers:\n  - { username: c, plugins: [{ name: cors, route: rr, config: {} }] }'), 'deck: consumer c: plugin cors: route "rr" names no route of this file'],
  ['a plugin config that is not a mapping', deck('{ name: r, paths: [/a], plugins: [{ name: cors, config: [1] }] }'), 'route r: plugin cors: config must be a mapping'],
  ['a plugin without a name', deck('{ name: r, paths: [/a] }', 'plugins:\n  - { config: {} }'), 'plugins: every plugin needs a name'],
  // decK refuses these; the nesting used to win silently, scoping the plugin to another route than it names.
  ['a route\'s plugin naming another route', deck('{ name: r, paths: [/a], plugins: [{ name: cors, route: r2, config: {} }] }\n{ name: r2, paths: [/b] }'), 'deck: route r: plugin cors: route "r2" is not the route it is nested under (r)'],
  ['a route\'s plugin naming another service than the route\'s', deck('{ name: r, paths: [/a], plugins: [{ name: cors, service: s2, config: {} }] }', '  - { name: s2, url: "http://127.0.0.1:2" }'), 'deck: route r: plugin cors: service "s2" is not the service it is nested under (s)'],
  ['a service\'s plugin naming another service', deck('{ name: r, paths: [/a] }', '  - { name: s2, url: "http://127.0.0.1:2" }').replace('    routes:', '    plugins: [{ name: cors, service: s2, config: {} }]\n    routes:'), 'deck: service s: plugin cors: service "s2" is not the service it is nested under (s)'],
  ['a consumer\'s plugin naming another consumer', deck('{ name: r, paths: [/a] }', 'consumers:\n  - { username: c, plugins: [{ name: cors, consumer: c2, config: {} }] }\n  - { username: c2 }'), 'deck: consumer c: plugin cors: consumer "c2" is not the consumer it is nested under (c)'],
];

for (const [title, text, message] of REFUSED) {
  test(`the deck is refused naming the field: ${title}`, (t) => {
    const error = t.throws(() => load(text), { instanceOf: DeckError });
    t.true(error!.message.includes(message), error!.message);
  });
}

test('two services of one name are refused (the first one\'s routes would go to the second one\'s URL), naming the name', (t) => {
  const text = `_format_version: "3.0"
services:
  - { name: s, url: "http://127.0.0.1:1", routes: [{ name: a, paths: [/a] }] }
  - { name: s, url: "http://127.0.0.1:2", routes: [{ name: b, paths: [/b] }] }
`;
  const error = t.throws(() => load(text), { instanceOf: DeckError });
  t.is(error?.message, 'deck: services[1]: name "s" is used twice (names are unique in Kong)');
});

test('a refused deck ends the start with one line naming the deck file, not a stack trace', (t) => {
  const error = t.throws(() => load(deck('{ name: r, paths: [/v1], methods: GET }')));
  const line = startupFailureLine(error, loadBaseConfig({ NODE_ENV: 'test' }));
  t.is(line, 'cannot start the edge: deck: route r: methods must be a list; fix the deck file (EDGE_DECK_FILE) or the DECK_* setting it names');
});

test('a well-formed deck with every field the embedded gateway reads still loads and routes', (t) => {
  const router = load(
    deck(
      "{ name: r, paths: ['~/v1(/|$)', /p], methods: [GET], strip_path: false, preserve_host: false, regex_priority: 3, plugins: [{ name: cors, enabled: true, config: {} }] }",
      'consumers:\n  - { username: c, plugins: [{ name: request-termination, config: { status_code: 401 } }] }\nplugins:\n  - { name: cors, route: r, config: {} }\n  - { name: cors, service: s, config: {} }\n  - { name: cors, consumer: c, config: {} }\n  - { name: cors, route: r, consumer: c, config: {} }\n  - { name: cors, service: s, consumer: c, config: {} }',
    ),
  );
  t.is(router.match('GET', '/v1/models')?.route.name, 'r');
  t.is(router.match('GET', '/p/x')?.route.name, 'r');
  t.is(router.match('GET', '/other'), null);
});

test('a deck that is not valid YAML ends the start with one line giving where, never quoting the rendered file (it may hold a DECK_ secret)', (t) => {
  const secret = 'gw-secret-"value';
  const text = '_format_version: "3.0"\nservices:\n  - name: s\n    url: "http://127.0.0.1:1"\n    tags: ["${{ env "DECK_SECRET" }}"]\n';
  const error = t.throws(() => parseDeck(text, { DECK_SECRET: secret }), { instanceOf: DeckError });
  t.regex(error!.message, /^deck: not valid YAML: .* at line 5, column \d+$/);
  t.false(error!.message.includes('gw-secret'));
  const line = startupFailureLine(error, loadBaseConfig({ NODE_ENV: 'test' }));
  t.truthy(line);
  t.false(line!.includes('gw-secret'));
  // A key given twice is refused the same way (the YAML parser's rule, as decK's).
  t.throws(() => parseDeck('_format_version: "3.0"\nplugins: []\nplugins: []\n', {}), { instanceOf: DeckError, message: 'deck: not valid YAML: Map keys must be unique at line 3, column 1' });
});
