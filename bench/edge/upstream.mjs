// A minimal local upstream for the edge benchmark: answers every request with a small JSON body.
import { createServer } from 'node:http';

const body = JSON.stringify({ object: 'list', data: [{ id: 'model-a', object: 'model' }] });
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`));
process.once('SIGTERM', () => process.exit(0));
