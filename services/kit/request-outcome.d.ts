/**
 * What every record of a finished request holds, whoever keeps it: the edge's access line and a
 * service's recent-requests log. Identity is what the edge verified, never what a client sent.
 * A declaration file: llm-api's recent-requests entry, which the web console reads, extends it
 * without compiling kit code into the console's bundle.
 */
export interface RequestOutcome {
  request_id: string;
  method: string;
  /** Without the query string. */
  path: string;
  /** The route that matched (a decK route name at the edge, a route-table template in a service); null when none did. */
  route: string | null;
  status: number;
  duration_ms: number;
  /** Whether the client left before the answer ended. */
  aborted: boolean;
  user_id: string | null;
}
