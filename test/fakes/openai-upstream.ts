import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';

/**
 * A fake OpenAI-compatible provider: a real HTTP server with `GET /v1/models` and
 * `POST /v1/chat/completions` (JSON and SSE). Behaviour per request comes from directives in the
 * last user message, so tests running at the same time do not disturb each other:
 *   #fail:<status>       answer with that status (OpenAI error body)
 *   #delay:<ms>          wait before the headers
 *   #midstream:<k>       stream k content chunks, then destroy the socket
 *   #errorevent:<k>      stream k chunks, then send `data: {"error":…}` and close (no [DONE])
 *   #hold                stream one chunk, then keep the stream open until the client leaves
 *   #slow:<ms>           wait <ms> between chunks (not streamed: <ms> per word before the answer)
 *   #words:<k>           answer with k words
 *   #reason              also return reasoning (`reasoning_content`), as reasoning models do
 * Instance-wide switches (`failAll`, `down`) act on every request (failover tests).
 * Tool calls: when the request has tools and tool_choice is not "none", the answer calls the
 * first tool (parallel: every tool) with argument deltas; `#notools` answers text instead (a model
 * that chooses not to call the tools it was offered).
 * Scripted conversations (tool loops): `script(name, steps)`, then `#script:<name>` in the last user
 * message. The answer to a request is the step whose index is the number of assistant turns after
 * that user message (the last step repeats). A step calls tools, answers text (a function of the
 * messages, e.g. to quote a tool's output), refuses (`refusal`), holds the request until the client
 * leaves, or waits for a `gate` the test opens. A step's tool calls are not made when the request's tool_choice is
 * "none": the step answers its content, or `NO_TOOLS_ANSWER`.
 */
export const NO_TOOLS_ANSWER = 'Answering without calling a tool.';
export interface ScriptStep {
  /** `custom`: a custom tool's call (`type: 'custom'`, `custom: {name, input}`), `arguments` its input. */
  tool_calls?: Array<{ name: string; arguments: Record<string, unknown> | string; custom?: boolean }>;
  content?: string | ((messages: any[]) => string);
  finish_reason?: string;
  /** The model refuses (OpenAI's structured refusal): `message.refusal`, streamed as `delta.refusal` pieces. */
  refusal?: string;
  /**
   * Streamed tool calls without `index` (as some providers send them): each call as a first delta
   * with its id and name, then one with its name again and its arguments, neither with an index.
   */
  indexlessToolCalls?: boolean;
  /** Never answer; the client's disconnect ends it (counted in `aborted()`). */
  hold?: boolean;
  /** Answer only once this settles (a test releases it when it has seen what it waits for). */
  gate?: Promise<unknown>;
}

export interface FakeRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: any;
  /** The body as it arrived (UTF-8). */
  raw: string;
}

export interface FakeUpstreamOptions {
  name?: string;
  models?: Array<Record<string, unknown> & { id: string }>;
  apiKey?: string;
  /**
   * Speak HTTP/2 over cleartext (prior knowledge) instead of HTTP/1.1. `connectionsOpened` then
   * counts HTTP/2 connections, each carrying many requests; the directives that cut the socket
   * (`#midstream`, `streamsDieEarly`) cut the whole connection.
   */
  http2?: boolean;
}

export interface FakeUpstream {
  url: string; // base URL ending in /v1
  port: number;
  name: string;
  requests: FakeRequest[];
  chatCount(): number;
  /**
   * Streams the client abandoned (the socket closed before the stream ended), across every request.
   * Tests running at the same time share it: to check one request of your own, use `abortsOf`.
   */
  aborted(): number;
  /** Abandoned streams whose last user message contains `marker` (a string unique to one test). */
  abortsOf(marker: string): number;
  /** Settles once a stream whose last user message contains `marker` has been abandoned. */
  abortedFor(marker: string): Promise<void>;
  /** TCP connections accepted so far (a client that reuses its connections keeps this low). */
  connectionsOpened(): number;
  setModels(models: FakeUpstreamOptions['models']): void;
  failAll(status: number | null, options?: { retryAfter?: string }): void;
  /** Every chat request waits this long before its headers (0 = off). */
  delayAll(ms: number): void;
  /** Stream requests get a 200 event-stream head, then the socket dies before any body byte. */
  streamsDieEarly(on: boolean): void;
  /** Streams send everything up to `data: [DONE]` but end their body only at `releaseStreamEnds()`. */
  holdStreamEnds(on: boolean): void;
  /** Ends the bodies held by `holdStreamEnds`; returns how many there were. */
  releaseStreamEnds(): number;
  /** Registers a scripted conversation, selected by `#script:<name>` in the last user message. */
  script(name: string, steps: ScriptStep[]): void;
  /** Requests of a scripted conversation, in arrival order. */
  scriptRequests(name: string): FakeRequest[];
  /** Requests currently held by a `hold` step. */
  holding(): number;
  /** Refuse connections entirely (connect errors) until `up()`. */
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

const words = (text: string) => text.split(/\s+/).filter(Boolean).length;

function lastUserText(messages: any[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) return m.content.map((p: any) => p.text ?? '').join(' ');
  }
  return '';
}

function directive(text: string, name: string): string | undefined {
  const match = new RegExp(`#${name}(?::(\\S+))?`).exec(text);
  return match ? (match[1] ?? '') : undefined;
}

export async function startFakeUpstream(options: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const name = options.name ?? 'fake';
  let models = options.models ?? [{ id: 'fake-model', owned_by: 'fake-org', created: 1700000000 }];
  let failStatus: number | null = null;
  let failRetryAfter: string | undefined;
  let dieEarly = false;
  let holdEnds = false;
  const heldEnds: Array<() => void> = [];
  let delayAllMs = 0;
  const requests: FakeRequest[] = [];
  let chats = 0;
  let aborted = 0;
  // The last user message of every abandoned stream, and the tests waiting for one (by marker).
  const abortedTexts: string[] = [];
  const abortWaiters: Array<{ marker: string; resolve: () => void }> = [];
  const recordAbort = (text: string) => {
    aborted++;
    abortedTexts.push(text);
    for (const w of abortWaiters.filter((x) => text.includes(x.marker))) {
      abortWaiters.splice(abortWaiters.indexOf(w), 1);
      w.resolve();
    }
  };
  const sockets = new Set<import('node:net').Socket>();
  const scripts = new Map<string, ScriptStep[]>();
  let held = 0;

  const handler = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const body = raw ? JSON.parse(raw) : undefined;
    const path = (req.url ?? '').split('?')[0]!;
    requests.push({ path, headers: req.headers, body, raw });
    if (requests.length > 5000) requests.splice(0, requests.length - 5000);

    const sendError = (status: number, message: string, extra: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...extra });
      res.end(JSON.stringify({ error: { message, type: status === 429 ? 'requests' : status >= 500 ? 'server_error' : 'invalid_request_error', param: null, code: null } }));
    };
    if (options.apiKey && req.headers.authorization !== `Bearer ${options.apiKey}`) return sendError(401, 'Incorrect API key provided');

    if (req.method === 'GET' && path === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: models.map((m) => ({ object: 'model', created: 1700000000, owned_by: name, ...m })) }));
    }
    if (req.method !== 'POST' || path !== '/v1/chat/completions') return sendError(404, `Invalid URL (${req.method} ${path})`);
    chats++;
    if (failStatus) return sendError(failStatus, `${name} is failing`, failRetryAfter ? { 'retry-after': failRetryAfter } : {});

    const text = lastUserText(body.messages ?? []);
    const fail = directive(text, 'fail');
    if (fail) return sendError(Number(fail), `${name} injected failure`);
    const delay = Number(directive(text, 'delay') ?? 0) || delayAllMs;
    if (delay) await new Promise((r) => setTimeout(r, delay));

    const scriptName = directive(text, 'script');
    if (scriptName && scripts.has(scriptName)) return answerScripted(scriptName, body, res);

    const n = body.n ?? 1;
    const reason = directive(text, 'reason') !== undefined;
    const wordCount = Number(directive(text, 'words') ?? 5);
    const answer = Array.from({ length: wordCount }, (_, i) => (i === 0 ? `Hello from ${name}` : `w${i}`)).join(' ');
    const promptTokens = (body.messages ?? []).reduce((sum: number, m: any) => sum + (typeof m.content === 'string' ? words(m.content) : 1), 0);
    const tools = Array.isArray(body.tools) && body.tools.length > 0 && body.tool_choice !== 'none' && directive(text, 'notools') === undefined ? body.tools : null;
    const calls = tools ? (body.parallel_tool_calls === false ? tools.slice(0, 1) : tools) : [];
    const completionTokens = tools ? calls.length * 6 : words(answer);
    const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens, completion_tokens_details: { reasoning_tokens: 0 } };
    const id = `chatcmpl-${name}-${chats}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model;

    if (!body.stream) {
      // A provider takes as long to write an answer it does not stream: one `#slow` interval per word.
      const slow = Number(directive(text, 'slow') ?? 0);
      if (slow) await new Promise((r) => setTimeout(r, slow * wordCount));
      const choices = Array.from({ length: n }, (_, index) =>
        tools
          ? {
              index,
              message: {
                role: 'assistant',
                content: null,
                tool_calls: calls.map((t: any, i: number) => ({ id: `call_${index}_${i}`, type: 'function', function: { name: t.function.name, arguments: JSON.stringify({ q: 'x', i }) } })),
              },
              finish_reason: 'tool_calls',
            }
          : {
              index,
              message: { role: 'assistant', content: n > 1 ? `${answer} #${index}` : answer, ...(reason ? { reasoning_content: `thinking ${index}` } : {}) },
              finish_reason: 'stop',
            },
      );
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ id, object: 'chat.completion', created, model, choices, usage }));
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    if (dieEarly) {
      setTimeout(() => res.socket?.destroy(), 5);
      return;
    }
    const includeUsage = body.stream_options?.include_usage === true;
    const chunk = (choices: any[], extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...(includeUsage ? { usage: null } : {}), ...extra })}\n\n`;
    let closed = false;
    res.on('close', () => {
      if (!res.writableFinished) {
        closed = true;
        recordAbort(text);
      }
    });
    const slow = Number(directive(text, 'slow') ?? 0);
    // Settles once everything written so far has been handed to the socket.
    let written: Promise<void> = Promise.resolve();
    const send = async (data: string) => {
      if (closed) return;
      written = new Promise<void>((resolve) => res.write(data, () => resolve()));
      if (slow) await new Promise((r) => setTimeout(r, slow));
    };
    const midstream = directive(text, 'midstream');
    const errorEvent = directive(text, 'errorevent');
    const limit = midstream !== undefined ? Number(midstream) : errorEvent !== undefined ? Number(errorEvent) : Infinity;
    let sent = 0;

    for (let index = 0; index < n; index++) await send(chunk([{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
    if (directive(text, 'hold') !== undefined) {
      await send(chunk([{ index: 0, delta: { content: 'held' }, logprobs: null, finish_reason: null }]));
      return; // never ends; the client's disconnect closes it
    }
    if (tools) {
      for (let index = 0; index < n; index++) {
        for (const [i, t] of calls.entries()) {
          await send(chunk([{ index, delta: { tool_calls: [{ index: i, id: `call_${index}_${i}`, type: 'function', function: { name: t.function.name, arguments: '' } }] }, logprobs: null, finish_reason: null }]));
          for (const piece of ['{"q":', '"x",', `"i":${i}}`]) {
            await send(chunk([{ index, delta: { tool_calls: [{ index: i, function: { arguments: piece } }] }, logprobs: null, finish_reason: null }]));
          }
        }
        await send(chunk([{ index, delta: {}, logprobs: null, finish_reason: 'tool_calls' }]));
      }
    } else {
      if (reason) {
        for (const piece of ['thinking', ' hard']) {
          for (let index = 0; index < n; index++) await send(chunk([{ index, delta: { reasoning_content: piece }, logprobs: null, finish_reason: null }]));
        }
      }
      const pieces = answer.split(' ');
      for (const [k, piece] of pieces.entries()) {
        for (let index = 0; index < n; index++) {
          if (sent >= limit) break;
          await send(chunk([{ index, delta: { content: k === 0 ? piece : ` ${piece}` }, logprobs: null, finish_reason: null }]));
          sent++;
        }
      }
      if (midstream !== undefined) {
        // Let the chunks reach the socket first, so the client gets them before the connection drops.
        await written;
        res.socket?.destroy();
        return;
      }
      if (errorEvent !== undefined) {
        await send(`data: ${JSON.stringify({ error: { message: `${name} broke`, type: 'server_error', param: null, code: 'boom' } })}\n\n`);
        return void res.end();
      }
      for (let index = 0; index < n; index++) await send(chunk([{ index, delta: {}, logprobs: null, finish_reason: 'stop' }]));
    }
    if (includeUsage) await send(chunk([], { usage }));
    await send('data: [DONE]\n\n');
    // holdStreamEnds: the body's end waits for the test's releaseStreamEnds().
    if (holdEnds) heldEnds.push(() => res.end());
    else res.end();
  };

  function answerScripted(name: string, body: any, res: http.ServerResponse, gated?: ScriptStep): void | Promise<void> {
    const messages: any[] = body.messages ?? [];
    let lastUser = -1;
    messages.forEach((m, i) => {
      if (m?.role === 'user') lastUser = i;
    });
    const turn = messages.slice(lastUser + 1).filter((m) => m?.role === 'assistant').length;
    const steps = scripts.get(name)!;
    const step = gated ?? steps[Math.min(turn, steps.length - 1)]!;
    if (step.gate) return step.gate.then(() => answerScripted(name, body, res, { ...step, gate: undefined }));
    if (step.hold) {
      held++;
      return new Promise<void>((resolve) =>
        res.on('close', () => {
          held--;
          recordAbort(lastUserText(messages));
          resolve();
        }),
      );
    }
    // A request with tool_choice "none" gets text, as a provider's model cannot call a tool then.
    const refused = body.tool_choice === 'none' && (step.tool_calls?.length ?? 0) > 0;
    const calls: any[] = (refused ? [] : (step.tool_calls ?? [])).map((c, i) => {
      const text = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments);
      const id = `call_${name}_${turn}_${i}`;
      return c.custom ? { id, type: 'custom', custom: { name: c.name, input: text } } : { id, type: 'function', function: { name: c.name, arguments: text } };
    });
    const content = typeof step.content === 'function' ? step.content(messages) : (step.content ?? (calls.length || step.refusal !== undefined ? null : refused ? NO_TOOLS_ANSWER : ''));
    const usage = { prompt_tokens: messages.length, completion_tokens: 3, total_tokens: messages.length + 3 };
    const message = { role: 'assistant', content, ...(step.refusal !== undefined ? { refusal: step.refusal } : {}), ...(calls.length ? { tool_calls: calls } : {}) };
    const finish = step.finish_reason ?? (calls.length ? 'tool_calls' : 'stop');
    const id = `chatcmpl-${name}-${chats}`;
    const created = Math.floor(Date.now() / 1000);
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ id, object: 'chat.completion', created, model: body.model, choices: [{ index: 0, message, finish_reason: finish }], usage }));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const chunk = (delta: unknown, finish_reason: string | null, extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: body.model, choices: [{ index: 0, delta, logprobs: null, finish_reason }], ...extra })}\n\n`;
    // The text in word-sized pieces, as providers stream it.
    res.write(chunk({ role: 'assistant', content: '' }, null));
    for (const piece of (content ?? '').split(/(?<= )/)) if (piece) res.write(chunk({ content: piece }, null));
    for (const piece of (step.refusal ?? '').split(/(?<= )/)) if (piece) res.write(chunk({ refusal: piece }, null));
    if (calls.length && step.indexlessToolCalls) {
      for (const c of calls) {
        res.write(chunk({ tool_calls: [{ id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] }, null));
        res.write(chunk({ tool_calls: [{ function: { name: c.function.name, arguments: c.function.arguments } }] }, null));
      }
    } else if (calls.length) res.write(chunk({ tool_calls: calls.map((c, index) => ({ index, ...c })) }, null));
    res.write(chunk({}, finish));
    if (body.stream_options?.include_usage) res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: body.model, choices: [], usage })}\n\n`);
    res.end('data: [DONE]\n\n');
  }

  const serve = (req: http.IncomingMessage, res: http.ServerResponse) => {
    handler(req, res).catch((error) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: String(error), type: 'server_error', param: null, code: null } }));
    });
  };
  // HTTP/2's compatibility API gives the handler the same request and response methods it uses.
  const server = options.http2 ? http2.createServer(serve as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void) : http.createServer(serve);
  if (server instanceof http.Server) server.keepAliveTimeout = 65_000;
  let connectionsOpened = 0;
  server.on('connection', (s: import('node:net').Socket) => {
    connectionsOpened++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  let listening = true;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    name,
    requests,
    chatCount: () => chats,
    aborted: () => aborted,
    abortsOf: (marker) => abortedTexts.filter((text) => text.includes(marker)).length,
    abortedFor: (marker) =>
      abortedTexts.some((text) => text.includes(marker)) ? Promise.resolve() : new Promise<void>((resolve) => abortWaiters.push({ marker, resolve })),
    connectionsOpened: () => connectionsOpened,
    script(scriptName, steps) {
      scripts.set(scriptName, steps);
    },
    scriptRequests: (scriptName) => requests.filter((r) => JSON.stringify(r.body?.messages ?? []).includes(`#script:${scriptName}`)),
    holding: () => held,
    setModels(next) {
      models = next ?? [];
    },
    delayAll(ms) {
      delayAllMs = ms;
    },
    streamsDieEarly(on) {
      dieEarly = on;
    },
    holdStreamEnds(on) {
      holdEnds = on;
    },
    releaseStreamEnds() {
      const ends = heldEnds.splice(0);
      for (const end of ends) end();
      return ends.length;
    },
    failAll(status, opts = {}) {
      failStatus = status;
      failRetryAfter = opts.retryAfter;
    },
    async down() {
      if (!listening) return;
      listening = false;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
    async up() {
      if (listening) return;
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
      listening = true;
    },
    async close() {
      for (const s of sockets) s.destroy();
      if (listening) await new Promise<void>((resolve) => server.close(() => resolve()));
      listening = false;
    },
  };
}
