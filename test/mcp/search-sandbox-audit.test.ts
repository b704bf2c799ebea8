import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import nock from 'nock';
import { createRemoteSandbox } from '../../services/mcp-tools/sandbox/remote.js';
import { createSerperBackend } from '../../services/mcp-tools/search/serper.js';
import { SearchBackendError } from '../../services/mcp-tools/search/types.js';

// The remote sandbox driver against a local stand-in answering SandboxFusion's run_code shape.
test.serial('the remote driver cuts output at the cap before a split UTF-8 character, never adding U+FFFD', async (t) => {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          status: 'Success',
          message: '',
          run_result: { status: 'Finished', execution_time: 0.01, return_code: 0, stdout: `${'a'.repeat(1023)}é and more`, stderr: `${'b'.repeat(1022)}😀` },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const sandbox = createRemoteSandbox({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, slots: 1, outputLimitBytes: 1024 });
    const out = await sandbox.run({ code: 'print(1)', timeoutMs: 1000 });
    t.is(out.stdout, 'a'.repeat(1023));
    t.is(out.stderr, 'b'.repeat(1022));
    t.true(out.truncated);
  } finally {
    server.close();
  }
});

test.serial('a search backend that does not answer within SEARCH_TIMEOUT_MS is a search failure saying it timed out, without the key', async (t) => {
  nock.disableNetConnect();
  nock('https://google.serper.dev').post('/search').delay(5_000).reply(200, { organic: [] });
  try {
    const backend = createSerperBackend({ apiKey: 'serper-secret-key', baseUrl: 'https://google.serper.dev', timeoutMs: 100 });
    const error = await t.throwsAsync(backend.search({ q: 'otters', num: 10, page: 1 }, new AbortController().signal), { instanceOf: SearchBackendError });
    t.is(error?.message, 'Serper could not be reached (timed out)');
  } finally {
    nock.cleanAll();
    nock.enableNetConnect();
  }
});
