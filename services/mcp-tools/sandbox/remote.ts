import { createSlots } from '../slots.js';
import { SandboxBusyError, type PythonResult, type PythonRun, type SandboxDriver } from './types.js';

/**
 * python_exec on a remote SandboxFusion-compatible service (`POST {SANDBOX_URL}/run_code`,
 * `{code, language: "python", run_timeout, stdin}` → `{status, message, run_result: {status,
 * execution_time, return_code, stdout, stderr}}`). The operator configures the address, so it is
 * trusted (no egress guard); output is capped here the same way as with bubblewrap.
 */
export function createRemoteSandbox(options: { url: string; slots: number; outputLimitBytes: number }): SandboxDriver {
  const slots = createSlots(options.slots);
  const endpoint = new URL('run_code', options.url.endsWith('/') ? options.url : `${options.url}/`).toString();
  const cap = (text: string) => {
    const bytes = Buffer.from(text ?? '', 'utf8');
    return bytes.length > options.outputLimitBytes
      ? { text: new TextDecoder().decode(bytes.subarray(0, options.outputLimitBytes)), truncated: true }
      : { text: text ?? '', truncated: false };
  };
  return {
    name: 'remote',
    unavailableReason: () => null,
    async run(input: PythonRun): Promise<PythonResult> {
      const slot = slots.take();
      if (slot === null) throw new SandboxBusyError();
      const started = performance.now();
      try {
        const signal = AbortSignal.any([AbortSignal.timeout(input.timeoutMs + 5000), ...(input.signal ? [input.signal] : [])]);
        const res = await fetch(endpoint, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ code: input.code, language: 'python', run_timeout: input.timeoutMs / 1000, stdin: input.stdin ?? '' }),
          signal,
        });
        if (!res.ok) throw new Error(`the remote sandbox answered HTTP ${res.status}`);
        const body = (await res.json()) as { status?: string; message?: string; run_result?: Record<string, unknown> | null };
        const run = body.run_result ?? {};
        if (body.status === 'SandboxError') throw new Error(`the remote sandbox failed: ${String(body.message ?? 'unknown error').slice(0, 200)}`);
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
        slots.give(slot);
      }
    },
  };
}
