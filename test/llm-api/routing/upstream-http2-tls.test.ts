import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loopbackCertificate } from '../../helpers/certificate.js';
import { cleanEnv, entryArgs, startChild } from '../../helpers/process.js';
import { watched } from '../../helpers/wait.js';

// LLM_UPSTREAM_HTTP_VERSION=2 and auto against providers over TLS, as the hosted APIs are reached:
// HTTP/2 is chosen in the TLS handshake (ALPN). Under 2 a provider whose server offers only HTTP/1.1
// must fail the completion, never fall back to one completion per connection; under auto it is
// spoken to over HTTP/1.1, one completion per connection, while a provider offering HTTP/2 gets
// many on one. The certificate is made here and trusted by the calling process through
// NODE_EXTRA_CA_CERTS, so the handshake is the real one. Providers that hold their answers until
// the test's count of requests is open at once: nothing is timed, a wrong pool hangs.

const dir = mkdtempSync(join(tmpdir(), 'h2-tls-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

/** A key and a self-signed certificate of the test's own (the tests of this file run at once). */
function certificate(): { key: Buffer; cert: Buffer; file: string } {
  const { keyFile, certFile } = loopbackCertificate(dir);
  return { key: readFileSync(keyFile), cert: readFileSync(certFile), file: certFile };
}

const answer = JSON.stringify({ id: 'chatcmpl-tls', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'over TLS' }, finish_reason: 'stop' }] });

async function call(url: string, certFile: string, httpVersion: string, more: Record<string, string> = {}): Promise<{ contents?: string[]; error?: string; code?: string }> {
  const child = startChild(process.execPath, entryArgs('test/fakes/provider-call.ts'), {
    env: cleanEnv({ PROVIDER_URL: url, HTTP_VERSION: httpVersion, NODE_EXTRA_CA_CERTS: certFile, ...more }),
  });
  const { code } = await child.exited;
  if (code !== 0) throw new Error(`the calling process exited with ${code}: ${child.stderr()}`);
  return JSON.parse(child.stdout());
}

test('over TLS, HTTP/2 is negotiated with a provider that offers it, and a provider that offers only HTTP/1.1 fails the completion', async (t) => {
  const { key, cert, file } = certificate();
  const protocols: string[] = [];
  const h2 = http2.createSecureServer({ key, cert }, (req, res) => {
    protocols.push(`h2 server: HTTP/${req.httpVersion}`);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(answer);
  });
  let h1Requests = 0;
  const h1Only = https.createServer({ key, cert, ALPNProtocols: ['http/1.1'] }, (_req, res) => {
    h1Requests++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(answer);
  });
  await Promise.all([h2, h1Only].map((s) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))));
  const url = (s: { address(): unknown }) => `https://127.0.0.1:${(s.address() as AddressInfo).port}/v1/chat/completions`;
  try {
    t.deepEqual(await call(url(h2), file, '2'), { contents: ['over TLS'] });
    t.deepEqual(protocols, ['h2 server: HTTP/2.0']);
    t.deepEqual(await call(url(h1Only), file, '2'), { error: 'ProviderProtocolError', code: 'UPSTREAM_NOT_HTTP2' });
    t.is(h1Requests, 0, 'no request went out over the HTTP/1.1 connection');
    // The default speaks HTTP/1.1 to the same provider.
    t.deepEqual(await call(url(h1Only), file, '1.1'), { contents: ['over TLS'] });
    t.is(h1Requests, 1);
  } finally {
    await Promise.all([h2, h1Only].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
});

test('auto: a provider whose handshake offers HTTP/2 gets 20 completions at once on one connection', async (t) => {
  const { key, cert, file } = certificate();
  const server = http2.createSecureServer({ key, cert });
  let sessions = 0;
  server.on('session', () => sessions++);
  const held: http2.ServerHttp2Stream[] = [];
  const versions = new Set<string>();
  let first = true;
  const heldCount = watched();
  const respond = (stream: http2.ServerHttp2Stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/json' });
    stream.end(answer);
  };
  server.on('stream', (stream) => {
    versions.add(stream.session?.alpnProtocol ?? 'none');
    stream.resume();
    if (first) return ((first = false), respond(stream));
    held.push(stream);
    heldCount.set(held.length);
  });
  void heldCount.reached(20).then(() => held.forEach(respond));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
    const result = await call(url, file, 'auto', { WARM: '1', COMPLETIONS: '20' });
    t.deepEqual(result, { contents: Array(21).fill('over TLS') });
    t.is(sessions, 1, 'the 20 went out together on the connection the first one opened');
    t.deepEqual([...versions], ['h2']);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('auto: a provider that offers only HTTP/1.1 is spoken to over HTTP/1.1, one completion per connection, never pipelined', async (t) => {
  const { key, cert, file } = certificate();
  const sockets = new Set<unknown>();
  const held: Array<() => void> = [];
  const versions = new Set<string>();
  let first = true;
  // Node's server reads a pipelined request only after answering the one before it on the same
  // connection: four held at once means four connections.
  const heldCount = watched();
  const server = https.createServer({ key, cert, ALPNProtocols: ['http/1.1'] }, (req, res) => {
    sockets.add(req.socket);
    versions.add(req.httpVersion);
    const respond = () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(answer);
    };
    if (first) return ((first = false), respond());
    held.push(respond);
    heldCount.set(held.length);
  });
  void heldCount.reached(4).then(() => held.forEach((respond) => respond()));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
    const result = await call(url, file, 'auto', { WARM: '1', COMPLETIONS: '4', CONNECTIONS: '4' });
    t.deepEqual(result, { contents: Array(5).fill('over TLS') });
    t.is(sockets.size, 4, 'the warm connection and three more, one completion each');
    t.deepEqual([...versions], ['1.1']);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
