// The same suite with the edge reaching llm-api over loopback HTTP (EDGE_IN_PROCESS_DISPATCH=false):
// the usage report then arrives as a proxied header or trailer instead of through the in-process hand-off.
process.env.TEST_EDGE_TRANSPORT = 'http';
await import('./access-log.test.js');
