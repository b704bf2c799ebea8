// The same suite with the edge reaching the services over loopback HTTP (EDGE_IN_PROCESS_DISPATCH=false):
// the default run of ./edge-conformance.test.ts covers the in-process hand-off, this one the HTTP hop.
process.env.TEST_EDGE_TRANSPORT = 'http';
await import('./edge-conformance.test.js');
