import http from 'node:http';
import test from 'ava';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// A service may answer before the client has sent its whole body (413 on an oversized body). The
// client's next request on the same keep-alive agent must still get a clean answer, not a reset.
let p: TestPlatform;
test.before(async () => {
  p = await startTestPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

function send(agent: http.Agent, path: string, body?: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, p.url);
    const req = http.request(
      { agent, host: url.hostname, port: url.port, path: url.pathname, method: body ? 'POST' : 'GET', headers: body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {} },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

test('an early answer to a large body leaves the client able to send its next request', async (t) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const { status: guestStatus, text } = await send(agent, '/llm/auth/guest-login', Buffer.from('{}'));
  t.is(guestStatus, 201);
  const token = (JSON.parse(text) as { access_token: string }).access_token;
  const big = Buffer.from(JSON.stringify({ title: 'x'.repeat(3 * 1024 * 1024) }));
  const oversized = await new Promise<number>((resolve, reject) => {
    const url = new URL('/v1/conversations', p.url);
    const req = http.request(
      { agent, host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(big.length) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(big);
  });
  t.is(oversized, 413);
  const next = await send(agent, '/healthz');
  t.is(next.status, 200);
});
