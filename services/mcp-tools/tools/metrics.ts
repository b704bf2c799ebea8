import { Counter, Histogram, type Registry } from 'prom-client';

/** Prometheus series per tool: calls by outcome, errors, and a duration histogram (on the service's /metrics). */
export type CallOutcome = 'ok' | 'error' | 'busy' | 'disabled' | 'invalid';

export function createToolMetrics(registry: Registry) {
  const calls = new Counter({
    name: 'mcp_tool_calls_total',
    help: 'MCP tool calls by tool and outcome (ok, error, busy, disabled, invalid)',
    labelNames: ['tool', 'outcome'] as const,
    registers: [registry],
  });
  const errors = new Counter({
    name: 'mcp_tool_errors_total',
    help: 'MCP tool calls that returned an error result, by tool',
    labelNames: ['tool'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'mcp_tool_call_duration_seconds',
    help: 'Duration of MCP tool calls by tool',
    labelNames: ['tool'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  return {
    record(tool: string, outcome: CallOutcome, seconds: number) {
      calls.inc({ tool, outcome });
      if (outcome !== 'ok') errors.inc({ tool });
      duration.observe({ tool }, seconds);
    },
  };
}
export type ToolMetrics = ReturnType<typeof createToolMetrics>;
