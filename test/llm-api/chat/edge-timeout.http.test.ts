// The same suite with the edge reaching llm-api over loopback HTTP (EDGE_IN_PROCESS_DISPATCH=false):
// the default run of ./edge-timeout.test.ts covers the in-process hand-off, this one the HTTP hop.
process.env.TEST_EDGE_TRANSPORT = 'http';
await import('./edge-timeout.test.js');
