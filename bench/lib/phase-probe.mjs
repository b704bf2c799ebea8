// Preloaded into the platform by bench/phases.ts (`--import`): where each chat request's round trip
// goes, from Node's and undici's diagnostics channels, so nothing in the platform is changed or
// wrapped. A request is followed by its request id: the edge's (or the client's) X-Request-ID is
// what the chat route sends the provider and what the client gets back. Per request:
//   in        the request's head arrived → the provider request was made (edge, plugins, the chat route)
//   queued    made → its head written to the provider's connection (undici's own wait)
//   provider  written → the provider's head read (the provider's time plus the wait for this thread)
//   body      the head read → the provider's body read to its end
//   out       the body's end → the client's response finished
// The first SIGUSR2 starts counting; the next writes one row per request ([in, queued, provider,
// body, out, total], ms) as JSON to the file named by the `out` query parameter of this module's
// URL, and stops (the platform's environment is the bench's own, not the caller's).
import dc from 'node:diagnostics_channel';
import { writeFileSync } from 'node:fs';

const out = new URL(import.meta.url).searchParams.get('out');
const STARTED = Symbol('phase-probe.started');
const PROVIDER = Symbol('phase-probe.provider');
/** Provider-side times by request id, until the client's response finishes. */
const byId = new Map();
let rows = [];
let counting = false;

const requestIdOf = (headers) => {
  if (!Array.isArray(headers)) return undefined;
  for (let i = 0; i < headers.length; i += 2) if (String(headers[i]).toLowerCase() === 'x-request-id') return String(headers[i + 1]);
  return undefined;
};

dc.subscribe('http.server.request.start', ({ request }) => {
  if (counting && request.url?.includes('/chat/completions')) request[STARTED] = performance.now();
});
dc.subscribe('undici:request:create', ({ request }) => {
  if (!counting) return;
  const id = requestIdOf(request.headers);
  if (id === undefined) return;
  const times = { created: performance.now(), sent: 0, head: 0, done: 0 };
  request[PROVIDER] = times;
  byId.set(id, times);
});
dc.subscribe('undici:client:sendHeaders', ({ request }) => {
  if (request[PROVIDER]) request[PROVIDER].sent = performance.now();
});
dc.subscribe('undici:request:headers', ({ request }) => {
  if (request[PROVIDER]) request[PROVIDER].head = performance.now();
});
dc.subscribe('undici:request:trailers', ({ request }) => {
  if (request[PROVIDER]) request[PROVIDER].done = performance.now();
});
dc.subscribe('http.server.response.finish', ({ request, response }) => {
  const started = request[STARTED];
  if (started === undefined) return;
  const id = response.getHeader('x-request-id');
  const times = byId.get(String(id));
  byId.delete(String(id));
  if (!times || !times.sent || !times.head || !times.done) return;
  const finished = performance.now();
  rows.push([times.created - started, times.sent - times.created, times.head - times.sent, times.done - times.head, finished - times.done, finished - started]);
});

// The rows go out as they are: bench/phases.ts summarises them with the bench's own percentile.
process.on('SIGUSR2', () => {
  if (!counting) {
    counting = true;
    rows = [];
    return;
  }
  counting = false;
  if (out) writeFileSync(out, JSON.stringify(rows));
  rows = [];
  byId.clear();
});
