import { buildConnector, type Agent } from 'undici';
import type { EgressGuard } from '../../services/kit/index.js';

/**
 * The HTTP version provider connections speak (LLM_UPSTREAM_HTTP_VERSION): `1.1`; `2`, required of
 * every provider; `auto`, HTTP/2 where the TLS handshake negotiates it and HTTP/1.1 elsewhere
 * (cleartext providers, servers that do not offer it).
 */
export type ProviderHttpVersion = '1.1' | '2' | 'auto';

/**
 * Requests in flight on one HTTP/2 provider connection. RFC 9113 asks a server to allow at least
 * 100 concurrent streams; past that a server may hold or refuse them, so the pool opens another
 * connection instead.
 */
export const STREAMS_PER_HTTP2_CONNECTION = 100;

/** A provider connection that negotiated something other than HTTP/2 where HTTP/2 is required. */
export class ProviderProtocolError extends Error {
  readonly code = 'UPSTREAM_NOT_HTTP2';
  constructor(negotiated: string) {
    super(`the provider connection negotiated ${negotiated}, not HTTP/2 (LLM_UPSTREAM_HTTP_VERSION=2)`);
    this.name = 'ProviderProtocolError';
  }
}

export type Connector = ReturnType<typeof buildConnector>;
/** undici's connector options; its types lack `useH2c` (HTTP/2 by prior knowledge on cleartext). */
type ConnectorOptions = NonNullable<Parameters<typeof buildConnector>[0]> & { useH2c?: boolean };

/** `connector`, but a connection that did not end up speaking HTTP/2 is closed and fails. */
export function http2Only(connector: Connector): Connector {
  return (options, callback) =>
    connector(options, (error, socket) => {
      if (error) return callback(error, null);
      const negotiated = (socket as { alpnProtocol?: string | false }).alpnProtocol;
      if (negotiated === 'h2') return callback(null, socket!);
      socket!.destroy();
      callback(new ProviderProtocolError(negotiated ? negotiated : 'HTTP/1.1'), null);
    });
}

/**
 * How an undici Agent connects to providers, for every pool that calls them (llm-api's completions
 * and the provider-sync worker's model lists): the connect timeout, the egress guard's address
 * check at connect time and, under HTTP/2, the protocol.
 *
 * `2`: over TLS HTTP/2 is negotiated by ALPN and a provider that does not offer it fails to connect
 * (no silent fallback to one request per connection); over cleartext it is spoken by prior
 * knowledge. A connection carries up to STREAMS_PER_HTTP2_CONNECTION requests at once
 * (`pipelining`), which undici sends only for requests marked `idempotent`.
 *
 * `auto`: ALPN offers both and the provider chooses; cleartext speaks HTTP/1.1. Every connection
 * carries one request at a time here: only a pool that reads each connection's protocol
 * (llm-api's, `createProviderPool` with `negotiated`) may let an HTTP/2 one carry more.
 */
export function providerConnectOptions(options: { connectTimeoutMs: number; guard?: EgressGuard; httpVersion?: ProviderHttpVersion }): Pick<Agent.Options, 'connect' | 'allowH2' | 'pipelining'> {
  const connect = { timeout: options.connectTimeoutMs, ...(options.guard ? { lookup: options.guard.lookup } : {}) };
  if (options.httpVersion === 'auto') return { connect: buildConnector({ ...connect, allowH2: true }), allowH2: true };
  if (options.httpVersion !== '2') return { connect };
  return {
    connect: http2Only(buildConnector({ ...connect, allowH2: true, useH2c: true } as ConnectorOptions)),
    allowH2: true,
    pipelining: STREAMS_PER_HTTP2_CONNECTION,
  };
}
