import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cleanEnv, startChild } from '../../helpers/process.js';

// LLM_UPSTREAM_HTTP_VERSION=2 against providers over TLS, as the hosted APIs are reached: HTTP/2 is
// chosen in the TLS handshake (ALPN). A provider whose server offers only HTTP/1.1 must fail the
// completion, never fall back to one completion per connection. The certificate is made here and
// trusted by the calling process through NODE_EXTRA_CA_CERTS, so the handshake is the real one.

const dir = mkdtempSync(join(tmpdir(), 'h2-tls-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

function certificate(): { key: Buffer; cert: Buffer; file: string } {
  const key = join(dir, 'key.pem');
  const file = join(dir, 'cert.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', file, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  return { key: readFileSync(key), cert: readFileSync(file), file };
}

const answer = JSON.stringify({ id: 'chatcmpl-tls', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'over TLS' }, finish_reason: 'stop' }] });

async function call(url: string, certFile: string, httpVersion: string): Promise<{ content?: string; error?: string; code?: string }> {
  const child = startChild(process.execPath, ['--import', 'tsx', 'test/fakes/provider-call.ts'], {
    env: cleanEnv({ PROVIDER_URL: url, HTTP_VERSION: httpVersion, NODE_EXTRA_CA_CERTS: certFile }),
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
    t.deepEqual(await call(url(h2), file, '2'), { content: 'over TLS' });
    t.deepEqual(protocols, ['h2 server: HTTP/2.0']);
    t.deepEqual(await call(url(h1Only), file, '2'), { error: 'ProviderProtocolError', code: 'UPSTREAM_NOT_HTTP2' });
    t.is(h1Requests, 0, 'no request went out over the HTTP/1.1 connection');
    // The default speaks HTTP/1.1 to the same provider.
    t.deepEqual(await call(url(h1Only), file, '1.1'), { content: 'over TLS' });
    t.is(h1Requests, 1);
  } finally {
    await Promise.all([h2, h1Only].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
});
