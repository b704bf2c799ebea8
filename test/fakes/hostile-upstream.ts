import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A provider that misbehaves on purpose, chosen per request by a directive in the last user message:
 *   #echo:<status>      answers <status> with a body that echoes the request it got: headers
 *                       (the Authorization header included), body, and its own address
 *   #echotext:<status>  the same echo as plain text, not JSON
 *   #echostream         a stream that sends one chunk, then an error event echoing the Authorization header
 *   #bytes              a stream with CRLF line ends and two `data:` lines per event, written one byte at a time
 *   #fields             a stream with events that carry no data: `event: ping`, `id: 7`, `retry: 10`,
 *                       a comment, and `event: delta` beside data
 *   #bigevent:<bytes>   a stream whose second event is <bytes> long without a blank line
 *   #biganswer:<bytes>  a non-stream answer of about <bytes>
 *   #drip:<ms>          a stream that sends one chunk every <ms> and never ends on its own
 *   #cutevent           a stream whose body ends at the connection's close, in the middle of its second event
 *   #context            400 with OpenAI's context_length_exceeded error (message quoting the key)
 *   #hugeerror:<bytes>  500 with an error body of <bytes>, written as fast as it is read
 * `GET /v1/models` lists `models`.
 */
export interface HostileUpstream {
  url: string;
  host: string;
  chatCount(): number;
  /** Streams the gateway stopped reading (the socket closed before the end). */
  cut(): number;
  close(): Promise<void>;
}

const directive = (text: string, name: string): string | undefined => {
  const match = new RegExp(`#${name}(?::(\\S+))?(?!\\w)`).exec(text);
  return match ? (match[1] ?? '') : undefined;
};

export async function startHostileUpstream(options: { models: string[] }): Promise<HostileUpstream> {
  let chats = 0;
  let cut = 0;
  const sockets = new Set<import('node:net').Socket>();
  let host = '';

  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    if (req.method === 'GET' && req.url?.startsWith('/v1/models')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: options.models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'hostile' })) }));
    }
    chats++;
    const body = JSON.parse(raw);
    const last = [...body.messages].reverse().find((m: { role: string }) => m.role === 'user');
    const text = typeof last?.content === 'string' ? last.content : '';
    const echo = { got_headers: req.headers, got_body: body, served_by: `http://${host}/internal-node-7` };
    res.on('close', () => {
      if (!res.writableFinished) cut++;
    });

    const echoStatus = directive(text, 'echo');
    if (echoStatus !== undefined) {
      res.writeHead(Number(echoStatus), { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: { message: `Invalid request: ${JSON.stringify(echo)} (key ${req.headers.authorization})`, type: 'invalid_request_error', param: `messages ${req.headers.authorization}`, code: `bad_${req.headers.authorization}` } }));
    }
    const echoText = directive(text, 'echotext');
    if (echoText !== undefined) {
      res.writeHead(Number(echoText), { 'content-type': 'text/plain' });
      return res.end(`upstream ${host} refused ${req.headers.authorization}: ${raw}`);
    }
    if (directive(text, 'context') !== undefined) {
      res.writeHead(400, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: { message: `This model's maximum context length is 8192 tokens (key ${req.headers.authorization})`, type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } }));
    }
    const hugeError = directive(text, 'hugeerror');
    if (hugeError !== undefined) {
      res.writeHead(500, { 'content-type': 'text/plain' });
      const piece = 'e'.repeat(64 * 1024);
      for (let sent = 0; sent < Number(hugeError) && !res.destroyed; sent += piece.length) {
        if (!res.write(piece)) {
          // Each wait takes its listeners back, so a long body does not pile them up on the response.
          await new Promise<void>((resume) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resume();
            };
            res.once('drain', done);
            res.once('close', done);
          });
        }
      }
      return res.end();
    }
    const bigAnswer = directive(text, 'biganswer');
    if (bigAnswer !== undefined) {
      res.writeHead(200, { 'content-type': 'application/json' });
      const content = 'x'.repeat(Number(bigAnswer));
      return res.end(JSON.stringify({ id: 'chatcmpl-big', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] }));
    }

    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ id: 'chatcmpl-h', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop' }] }));
    }
    if (directive(text, 'cutevent') !== undefined) {
      // A body delimited by the connection's close (no length, not chunked), which closes inside an event.
      const cutChunk = JSON.stringify({ id: 'chatcmpl-h', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }] });
      res.socket!.end(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ${cutChunk}\n\ndata: ${cutChunk.slice(0, 40)}`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    const chunk = (content: string) => ({ id: 'chatcmpl-h', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [{ index: 0, delta: { content }, finish_reason: null }] });
    res.write(`data: ${JSON.stringify(chunk('Hello'))}\n\n`);

    if (directive(text, 'echostream') !== undefined) {
      res.write(`data: ${JSON.stringify({ error: { message: `stream broke for ${req.headers.authorization} at ${host}`, type: 'server_error', code: 'x' } })}\n\n`);
      return res.end();
    }
    if (directive(text, 'bytes') !== undefined) {
      // Two data lines per event (SSE joins them with a newline: still one JSON value), CRLF line ends.
      const events = [' one', ' two', ' three'].map((content) => {
        const json = JSON.stringify(chunk(content));
        const half = json.indexOf('"choices"');
        return `data: ${json.slice(0, half)}\r\ndata: ${json.slice(half)}\r\n\r\n`;
      });
      const bytes = Buffer.from(`${events.join('')}data: [DONE]\r\n\r\n`);
      res.socket?.setNoDelay(true);
      for (let i = 0; i < bytes.length; i++) {
        res.write(bytes.subarray(i, i + 1));
        // Give each byte its own turn of the event loop so it leaves as its own segment.
        await new Promise((r) => setImmediate(r));
      }
      return res.end();
    }
    if (directive(text, 'fields') !== undefined) {
      res.write('event: ping\n\n');
      res.write(`event: delta\ndata: ${JSON.stringify(chunk(' one'))}\n\n`);
      res.write(`id: 7\n\nretry: 10\n\n: keep-alive\n\ndata: ${JSON.stringify(chunk(' two'))}\n\nevent: ping\n\ndata: [DONE]\n\n`);
      return res.end();
    }
    const bigEvent = directive(text, 'bigevent');
    if (bigEvent !== undefined) {
      const piece = 'y'.repeat(64 * 1024);
      res.write('data: {"pad":"');
      for (let sent = 0; sent < Number(bigEvent) && !res.destroyed; sent += piece.length) {
        if (!res.write(piece)) await new Promise((r) => res.once('drain', r));
      }
      return res.end('"}\n\n');
    }
    const drip = directive(text, 'drip');
    if (drip !== undefined) {
      const timer = setInterval(() => res.write(`data: ${JSON.stringify(chunk(' drop'))}\n\n`), Number(drip) || 20);
      res.on('close', () => clearInterval(timer));
      return;
    }
    res.write(`data: ${JSON.stringify(chunk(' world'))}\n\ndata: [DONE]\n\n`);
    res.end();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `http://${host}/v1`,
    host,
    chatCount: () => chats,
    cut: () => cut,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
