import test from 'ava';
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { Duplex } from 'node:stream';
import { Registry } from 'prom-client';
import { createModelListClient, http2Only, ProviderProtocolError, STREAMS_PER_HTTP2_CONNECTION, type Connector } from '../../../domains/catalog/index.js';
import { connectionsForOpenFileLimit } from '../../../services/gateway/connections.js';
import { createEgressGuard, type Resolver } from '../../../services/kit/index.js';
import { registerProviderConnectionMetrics } from '../../../services/llm-api/routing/connection-metrics.js';
import { createUpstream, isTimeout } from '../../../services/llm-api/routing/upstream.js';
import { startFakeUpstream } from '../../fakes/openai-upstream.js';
import { untilFree } from '../../helpers/undici.js';
import { watched } from '../../helpers/wait.js';
import { bootstrapAdmin, startTestPlatform } from '../../helpers/platform.js';
import { randomBase62 } from '../../../services/kit/secrets.js';

// LLM_UPSTREAM_HTTP_VERSION=2: provider connections speak HTTP/2 and carry several completions at
// once. The provider here is a Node HTTP/2 server on loopback (cleartext, prior knowledge), which
// holds every stream until the test has seen what it waits for: nothing is timed.

interface H2Provider {
  url: string;
  /** HTTP/2 connections accepted, with the most streams each had open at once. */
  sessions: Array<{ open: number; peak: number }>;
  /** Resolves once `n` streams closed before the provider answered them (reset by the client). */
  resetCount(n: number): Promise<void>;
  /** Resolves once `n` streams are open at the same time. */
  openAtOnce(n: number): Promise<void>;
  /** Answers every held stream, and from now on every new one at once. */
  answerAll(): void;
  /** Answers the streams held now; new ones are held again. */
  answerHeld(): void;
  /** Cuts every connection, with the streams on it. */
  dropConnections(): void;
  close(): Promise<void>;
}

async function startH2Provider(settings: http2.Settings = {}): Promise<H2Provider> {
  const server = http2.createServer({ settings });
  const sessions: H2Provider['sessions'] = [];
  const live = new Set<http2.ServerHttp2Session>();
  const held = new Set<http2.ServerHttp2Stream>();
  const heldCount = watched();
  const resets = watched();
  let answering = false;
  const answer = (stream: http2.ServerHttp2Stream) => {
    held.delete(stream);
    if (stream.destroyed) return;
    stream.respond({ ':status': 200, 'content-type': 'application/json' });
    stream.end(JSON.stringify({ id: 'chatcmpl-h2', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'over h2' }, finish_reason: 'stop' }] }));
  };
  server.on('session', (session) => {
    const counts = { open: 0, peak: 0 };
    sessions.push(counts);
    live.add(session);
    session.on('close', () => live.delete(session));
    session.on('stream', (stream) => {
      counts.open++;
      counts.peak = Math.max(counts.peak, counts.open);
      stream.on('close', () => {
        counts.open--;
        if (held.delete(stream)) resets.set(resets.get() + 1);
      });
      stream.resume();
      if (answering) return answer(stream);
      held.add(stream);
      heldCount.set(held.size);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`,
    sessions,
    resetCount: resets.reached,
    openAtOnce: heldCount.reached,
    answerAll() {
      answering = true;
      for (const stream of [...held]) answer(stream);
    },
    answerHeld() {
      for (const stream of [...held]) answer(stream);
      heldCount.set(0);
    },
    dropConnections() {
      for (const session of live) session.destroy();
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const options = { connections: 64, connectTimeoutMs: 5_000, headersTimeoutMs: 10_000, bodyTimeoutMs: 10_000, httpVersion: '2' as const };
const call = (i: number) => ({ apiKey: 'sk-provider', requestId: `req-${i}` });
const contentOf = (body: { bytes: Buffer }) => JSON.parse(body.bytes.toString()).choices[0].message.content as string;

/** An HTTP/2 provider and llm-api's provider pool for one test, both closed however it ends. */
async function withH2Provider(overrides: Partial<Parameters<typeof createUpstream>[0]>, run: (provider: H2Provider, upstream: ReturnType<typeof createUpstream>) => Promise<void>, settings?: http2.Settings) {
  const provider = await startH2Provider(settings);
  const upstream = createUpstream({ ...options, ...overrides });
  try {
    await run(provider, upstream);
  } finally {
    await upstream.close();
    await provider.close();
  }
}

test('250 completions at once travel together over 3 HTTP/2 connections, none carrying more than 100', async (t) => {
  t.timeout(20_000, 'a completion was queued behind a full connection');
  await withH2Provider({}, async (provider, upstream) => {
    // In bursts of 50, with a turn of the event loop between them, as requests arrive: undici's
    // late `drain` of a connection that has since filled up must not draw the 101st onto it.
    const answers: Array<Promise<{ bytes: Buffer }>> = [];
    for (let i = 0; i < 250; i++) {
      if (i > 0 && i % 50 === 0) await new Promise((resolve) => setImmediate(resolve));
      answers.push(upstream.postJson(provider.url, '{"model":"m"}', call(i)).then((a) => a.readAll(1 << 20)));
    }
    // Only reached when all 250 are open at the provider at the same time: one connection per
    // completion at a time would need 250 connections, one completion at a time per connection
    // would never get there.
    await provider.openAtOnce(250);
    provider.answerAll();
    const bodies = await Promise.all(answers);
    t.true(bodies.every((b) => contentOf(b) === 'over h2'));
    t.is(provider.sessions.length, Math.ceil(250 / STREAMS_PER_HTTP2_CONNECTION));
    t.deepEqual(provider.sessions.map((s) => s.peak).sort((a, b) => b - a), [100, 100, 50]);
  });
});

test('a provider whose server allows 10 streams at once gets another connection for the 11th, not a queue behind the limit', async (t) => {
  t.timeout(20_000, 'completions were queued behind the server\'s stream limit');
  await withH2Provider(
    {},
    async (provider, upstream) => {
      // The first completion's connection reads the server's SETTINGS before its answer.
      const first = upstream.postJson(provider.url, '{"model":"m"}', call(0)).then((a) => a.readAll(1 << 20));
      await provider.openAtOnce(1);
      provider.answerHeld();
      t.is(contentOf(await first), 'over h2');
      const answers = Array.from({ length: 30 }, (_, i) => upstream.postJson(provider.url, '{"model":"m"}', call(i + 1)).then((a) => a.readAll(1 << 20)));
      // Reached only with all 30 open at the provider at once, 10 on each of 3 connections.
      await provider.openAtOnce(30);
      provider.answerAll();
      t.true((await Promise.all(answers)).every((b) => contentOf(b) === 'over h2'));
      t.deepEqual(provider.sessions.map((s) => s.peak), [10, 10, 10]);
    },
    { maxConcurrentStreams: 10 },
  );
});

test('a completion its caller cancels resets its own stream; the others on the connection go on', async (t) => {
  await withH2Provider({}, async (provider, upstream) => {
    const cancel = new AbortController();
    const kept = upstream.postJson(provider.url, '{"model":"m"}', call(1));
    const cancelled = upstream.postJson(provider.url, '{"model":"m"}', call(2), cancel.signal);
    await provider.openAtOnce(2);
    cancel.abort(new Error('the client left'));
    await t.throwsAsync(cancelled, { message: 'the client left' });
    // Reached only when the provider sees the cancelled stream end unanswered.
    await provider.resetCount(1);
    provider.answerAll();
    t.is(contentOf(await (await kept).readAll(1 << 20)), 'over h2');
    t.is(provider.sessions.length, 1, 'both rode one connection, which the cancel did not close');
  });
});

test('a connection that drops fails every completion on it that has not been answered, and the next one opens a new connection', async (t) => {
  await withH2Provider({}, async (provider, upstream) => {
    const waiting = [1, 2, 3].map((i) => upstream.postJson(provider.url, '{"model":"m"}', call(i)));
    await provider.openAtOnce(3);
    provider.dropConnections();
    const outcomes = await Promise.allSettled(waiting);
    t.deepEqual(outcomes.map((o) => o.status), ['rejected', 'rejected', 'rejected']);
    provider.answerAll();
    t.is(contentOf(await (await upstream.postJson(provider.url, '{"model":"m"}', call(4))).readAll(1 << 20)), 'over h2');
    t.is(provider.sessions.length, 2);
  });
});

test('a stream the provider never answers fails at LLM_UPSTREAM_HEADERS_TIMEOUT_MS, alone: its connection carries the next', async (t) => {
  await withH2Provider({ headersTimeoutMs: 1_500 }, async (provider, upstream) => {
    const error = await t.throwsAsync(upstream.postJson(provider.url, '{"model":"m"}', call(1)));
    t.true(isTimeout(error), `${(error as { code?: string }).code}: ${error!.message}`);
    provider.answerAll();
    t.is(contentOf(await (await upstream.postJson(provider.url, '{"model":"m"}', call(2))).readAll(1 << 20)), 'over h2');
    t.is(provider.sessions.length, 1, 'the timeout reset one stream, not the connection');
  });
});

test('a cleartext provider that speaks only HTTP/1.1 fails the completion rather than hanging it', async (t) => {
  let requests = 0;
  const server = http.createServer((_req, res) => {
    requests++;
    res.end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const upstream = createUpstream(options);
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
    await t.throwsAsync(upstream.postJson(url, '{"model":"m"}', call(1)));
    t.is(requests, 0, 'the HTTP/1.1 server never saw a request it could serve');
  } finally {
    await upstream.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('over TLS, a connection that negotiated HTTP/1.1 is closed and fails with ProviderProtocolError; one that negotiated h2 is used', async (t) => {
  // undici's connector, as far as the check sees it: a socket and what ALPN chose.
  const negotiating = (alpnProtocol: string | false): Connector => (_options: unknown, callback: Parameters<Connector>[1]) => {
    const socket = Object.assign(new Duplex({ read() {}, write(_c, _e, done) { done(); } }), { alpnProtocol });
    callback(null, socket as never);
  };
  const outcome = (connector: Connector) =>
    new Promise<{ error: Error | null; socket: (Duplex & { alpnProtocol?: string }) | null }>((resolve) =>
      connector({ hostname: 'provider.example', host: 'provider.example', protocol: 'https:', port: '443' }, (error: Error | null, socket: unknown) => resolve({ error, socket: socket as never })),
    );
  for (const negotiated of ['http/1.1', false] as const) {
    const sockets: Duplex[] = [];
    const recording: Connector = (o: Parameters<Connector>[0], cb: Parameters<Connector>[1]) => negotiating(negotiated)(o, (e: Error | null, s: unknown) => (sockets.push(s as Duplex), cb(e as never, s as never)));
    const { error, socket } = await outcome(http2Only(recording));
    t.true(error instanceof ProviderProtocolError);
    t.is((error as ProviderProtocolError).code, 'UPSTREAM_NOT_HTTP2');
    t.is(socket, null);
    t.true(sockets[0]!.destroyed, `the ${negotiated || 'plain'} connection is closed, not pooled`);
  }
  const { error, socket } = await outcome(http2Only(negotiating('h2')));
  t.is(error, null);
  t.is(socket!.alpnProtocol, 'h2');
});

test('the egress guard still checks the address at connect time under HTTP/2', async (t) => {
  // A name that resolves to loopback: public-only rules refuse it when the connection is made.
  const resolver: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];
  await withH2Provider({ guard: createEgressGuard({ exclusive: true, resolver }) }, async (provider, upstream) => {
    const url = provider.url.replace('127.0.0.1', 'provider.test');
    const error = await t.throwsAsync(upstream.postJson(url, '{"model":"m"}', call(1)));
    t.regex(error!.message, /not allowed|refused|private|loopback/i);
    t.is(provider.sessions.length, 0, 'no connection reached the provider');
  });
});

test('the provider-sync worker reads model lists over HTTP/2 too', async (t) => {
  const fake = await startFakeUpstream({ http2: true, models: [{ id: 'h2-model' }] });
  const client = createModelListClient({ connectTimeoutMs: 5_000, httpVersion: '2' });
  try {
    const { status, body } = await client.getJson(`${fake.url}/models`, {}, 5_000);
    t.is(status, 200);
    t.deepEqual((body as { data: Array<{ id: string }> }).data.map((m) => m.id), ['h2-model']);
  } finally {
    await client.close();
    await fake.close();
  }
});

test('auto: a cleartext provider is spoken to over HTTP/1.1, for completions and model lists', async (t) => {
  const versions: string[] = [];
  const server = http.createServer((req, res) => {
    versions.push(req.httpVersion);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(req.url === '/v1/models' ? JSON.stringify({ object: 'list', data: [{ id: 'plain-model' }] }) : JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'over 1.1' }, finish_reason: 'stop' }] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  const upstream = createUpstream({ ...options, httpVersion: 'auto' });
  const models = createModelListClient({ connectTimeoutMs: 5_000, httpVersion: 'auto' });
  try {
    const answers = await Promise.all([1, 2, 3].map((i) => upstream.postJson(`${base}/chat/completions`, '{"model":"m"}', call(i))));
    for (const answer of answers) t.is(contentOf(await answer.readAll(1 << 20)), 'over 1.1');
    const { status, body } = await models.getJson(`${base}/models`, {}, 5_000);
    t.is(status, 200);
    t.deepEqual((body as { data: Array<{ id: string }> }).data.map((m) => m.id), ['plain-model']);
    t.deepEqual(versions, ['1.1', '1.1', '1.1', '1.1']);
  } finally {
    await models.close();
    await upstream.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('provider connections are counted by endpoint and protocol: opened, and open now', async (t) => {
  const sample = (text: string, name: string, endpoint: string, protocol: string) =>
    Number(new RegExp(`^${name}\\{endpoint="${endpoint}",protocol="${protocol}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
  await withH2Provider({}, async (provider, upstream) => {
    const registry = new Registry();
    registerProviderConnectionMetrics(registry, upstream.agent);
    provider.answerAll();
    for (let i = 0; i < 3; i++) t.is(contentOf(await (await upstream.postJson(provider.url, '{"model":"m"}', call(i))).readAll(1 << 20)), 'over h2');
    const endpoint = new URL(provider.url).origin;
    t.is(sample(await registry.metrics(), 'llm_upstream_connections_opened_total', endpoint, 'h2'), 1);
    t.is(sample(await registry.metrics(), 'llm_upstream_connections', endpoint, 'h2'), 1);
    const gone = once(upstream.agent, 'disconnect');
    provider.dropConnections();
    await gone;
    t.is(sample(await registry.metrics(), 'llm_upstream_connections', endpoint, 'h2'), 0);
    t.is(sample(await registry.metrics(), 'llm_upstream_connections_opened_total', endpoint, 'h2'), 1);
  });
  const server = http.createServer((_req, res) => res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'over 1.1' } }] })));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const upstream = createUpstream({ ...options, httpVersion: '1.1' });
  try {
    const registry = new Registry();
    registerProviderConnectionMetrics(registry, upstream.agent);
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    for (let i = 0; i < 2; i++) {
      t.is(contentOf(await (await upstream.postJson(`${endpoint}/v1/chat/completions`, '{"model":"m"}', call(i))).readAll(1 << 20)), 'over 1.1');
      // undici frees an HTTP/1.1 connection for its next request a turn of the event loop after an
      // answer ends (a request from a client arrives in a later turn anyway): wait until it is free.
      await untilFree(upstream.agent, endpoint, 1);
    }
    t.is(sample(await registry.metrics(), 'llm_upstream_connections_opened_total', endpoint, 'http/1.1'), 1, 'the second reused the first one\'s connection');
  } finally {
    await upstream.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('through the edge with the openai SDK: 20 streamed completions at once share one HTTP/2 provider connection', async (t) => {
  const adminKey = `sk_${randomBase62(32)}`;
  const fake = await startFakeUpstream({ http2: true, name: 'alpha', models: [{ id: 'model-a' }] });
  const p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_UPSTREAM_HTTP_VERSION: '2' } });
  try {
    const { client } = await bootstrapAdmin(p, adminKey, fake.url);
    const before = fake.connectionsOpened();
    const texts = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const stream = await client.chat.completions.create({ model: 'model-a', stream: true, messages: [{ role: 'user', content: `hello ${i} #words:4` }] });
        let text = '';
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
        return text;
      }),
    );
    t.deepEqual(texts, Array.from({ length: 20 }, () => 'Hello from alpha w1 w2 w3'));
    // Over HTTP/1.1 twenty streams at once take twenty connections.
    t.true(fake.connectionsOpened() - before <= 1, `${fake.connectionsOpened() - before} new provider connections`);
    // A held stream costs this process one socket, not two: the edge's default bound on open
    // connections (EDGE_MAX_CONNECTIONS=auto) divides the open-file limit by 1.01 instead of 2.
    const metrics = await (await fetch(`${p.metricsUrl}/metrics`, { headers: { connection: 'close' } })).text();
    const bound = Number(/^edge_connections_max(?:\{[^}]*\})? (\d+)$/m.exec(metrics)?.[1]);
    t.is(bound, connectionsForOpenFileLimit(undefined, 1.01)!);
    t.true(bound > connectionsForOpenFileLimit()!);
  } finally {
    await p.stop();
    await fake.close();
  }
});
