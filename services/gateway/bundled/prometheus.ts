/**
 * Kong's bundled `prometheus`: request metrics on Kong's status listener (`/metrics`). The embedded
 * edge accepts it in the deck and does not run it: it serves its own `/metrics` (the `edge_*`
 * series, services/gateway/metrics.ts). Skipping it cannot fail open, since it only observes
 * requests (Kong runs it in the log phase) and never decides whether one passes.
 *
 * Its config is still checked against Kong's schema (Kong 3.4–3.9, kong/plugins/prometheus/schema.lua),
 * so a deck Kong would refuse at `deck gateway sync` is refused by `npm start` too.
 */
const FIELDS = ['per_consumer', 'status_code_metrics', 'ai_metrics', 'latency_metrics', 'bandwidth_metrics', 'upstream_health_metrics'] as const;

export function checkPrometheusConfig(config: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(config)) {
    if (!(FIELDS as readonly string[]).includes(field)) throw new Error(`config.${field}: unknown field (known: ${FIELDS.join(', ')})`);
    if (value !== null && typeof value !== 'boolean') throw new Error(`config.${field}: expected a boolean`);
  }
}
