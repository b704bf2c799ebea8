import { createTrustedEndpoint, TRUSTED_ENDPOINT_MAX_BYTES } from '../../kit/index.js';
import { cappedCollector } from './output.js';
import { createRunSlots } from './slots.js';
import { type PythonResult, type PythonRun, type SandboxDriver } from './types.js';

/**
 * python_exec on a remote SandboxFusion-compatible service (`POST {SANDBOX_URL}/run_code`,
 * `{code, language: "python", run_timeout, stdin}` → `{status, message, run_result: {status,
 * execution_time, return_code, stdout, stderr}}`). The operator configures the address, so it is
 * called through the kit's trusted-endpoint client (no egress guard); output is capped here the same
 * way as with bubblewrap. The answer itself is refused past `answerLimitBytes` (at least the kit's
 * default): room for both streams at the cap with every byte escaped (6 bytes each), and the rest.
 */
export function createRemoteSandbox(options: { url: string; slots: number; outputLimitBytes: number }): SandboxDriver {
  const slots = createRunSlots(options.slots);
  const answerLimitBytes = Math.max(TRUSTED_ENDPOINT_MAX_BYTES, 2 * 6 * options.outputLimitBytes + 64 * 1024);
  const sandbox = createTrustedEndpoint({ name: 'the remote sandbox', baseUrl: options.url, maxBytes: answerLimitBytes });
  const cap = (text: string) => {
    const bytes = Buffer.from(text ?? '', 'utf8');
    if (bytes.length <= options.outputLimitBytes) return { text: text ?? '', truncated: false };
    const collector = cappedCollector(options.outputLimitBytes);
    collector.push(bytes);
    return { text: collector.text(), truncated: true };
  };
  return {
    name: 'remote',
    limits: { memoryMb: null, outputLimitBytes: options.outputLimitBytes },
    unavailableReason: () => null,
    async run(input: PythonRun): Promise<PythonResult> {
      const slot = slots.take(input.userId);
      const started = performance.now();
      try {
        const body = await sandbox.json<{ status?: string; message?: string; run_result?: Record<string, unknown> | null }>('run_code', {
          json: { code: input.code, language: 'python', run_timeout: input.timeoutMs / 1000, stdin: input.stdin ?? '' },
          signal: input.signal,
          timeoutMs: input.timeoutMs + 5000, // the run's own limit, and a little for the round trip
        });
        const run = body?.run_result ?? {};
        if (body?.status === 'SandboxError') throw new Error(`the remote sandbox failed: ${String(body.message ?? 'unknown error').slice(0, 200)}`);
        const stdout = cap(String(run.stdout ?? ''));
        const stderr = cap(String(run.stderr ?? ''));
        return {
          stdout: stdout.text,
          stderr: stderr.text,
          exit_code: typeof run.return_code === 'number' ? run.return_code : -1,
          duration_ms: Math.round(performance.now() - started),
          timed_out: run.status === 'TimeLimitExceeded',
          truncated: stdout.truncated || stderr.truncated,
        };
      } finally {
        slots.give(input.userId, slot);
      }
    },
  };
}
