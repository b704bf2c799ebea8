import { z } from 'zod';
import { PYTHON_MAX_TIMEOUT_MS } from '../config.js';
import { SandboxBusyError, SandboxUnavailableError, type SandboxDriver } from '../sandbox/index.js';
import { ToolFailure, defineTool } from './tool.js';

const input = z
  .object({
    code: z.string().min(1).max(200_000).describe('Python 3 source to run as a script. Print what you want to see.'),
    timeout_ms: z.number().int().min(100).max(PYTHON_MAX_TIMEOUT_MS).default(10_000).describe('Wall-clock limit in milliseconds (default 10000, max 60000).'),
    stdin: z.string().max(1_000_000).optional().describe('Text given to the program on standard input.'),
  })
  .strict();

const output = z.object({
  stdout: z.string(),
  stderr: z.string(),
  exit_code: z.number().int(),
  duration_ms: z.number().int(),
  timed_out: z.boolean(),
  truncated: z.boolean(),
});

export function pythonExecTool(deps: { sandbox: SandboxDriver }) {
  return defineTool({
    name: 'python_exec',
    title: 'Run Python',
    description: pythonExecDescription(deps.sandbox.limits),
    input,
    output,
    annotations: { readOnlyHint: true, openWorldHint: false, idempotentHint: false },
    unavailableReason: () => deps.sandbox.unavailableReason(),
    async run(ctx, args) {
      try {
        const result = await deps.sandbox.run({ code: args.code, stdin: args.stdin, timeoutMs: args.timeout_ms, signal: ctx.signal, userId: ctx.userId });
        // A run the cancel killed ends as an ordinary result (exit code 137, as if killed for its
        // memory): it is the cancel's doing, so the call is answered cancelled. The run changes
        // nothing outside its sandbox, so one that ended by itself as the cancel came loses nothing.
        if (ctx.signal.aborted) throw ctx.signal.reason;
        return { structured: result, text: render(result) };
      } catch (error) {
        if (ctx.signal.aborted) throw error;
        if (error instanceof SandboxUnavailableError || error instanceof SandboxBusyError) throw error;
        throw new ToolFailure(`python_exec could not start the sandbox: ${(error as Error).message}`);
      }
    },
  });
}

/** The tool's description, with the limits this deployment's sandbox enforces (its settings), not fixed figures. */
export function pythonExecDescription(limits: SandboxDriver['limits']): string {
  const memory = limits.memoryMb === null ? '' : `${sizeText(limits.memoryMb * 1024 * 1024)} of memory, `;
  return (
    'Runs Python 3 code in an isolated sandbox and returns stdout, stderr and the exit code. ' +
    'Use it for calculations, data processing and checking code. The sandbox has no network, no files ' +
    `except an empty writable /tmp, only the standard library, ${memory}and a time limit; ` +
    `each call starts fresh (nothing persists between calls). Output beyond ${sizeText(limits.outputLimitBytes)} per stream is cut off.`
  );
}

/** 512 MiB, 64 KiB, 1500 bytes: the largest binary unit that divides the size. */
function sizeText(bytes: number): string {
  for (const [unit, size] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]] as const) if (bytes % size === 0) return `${bytes / size} ${unit}`;
  return `${bytes} bytes`;
}

function render(r: z.infer<typeof output>): string {
  const parts = [r.stdout];
  if (r.stderr) parts.push(`[stderr]\n${r.stderr}`);
  const notes = [`exit code ${r.exit_code}`, `${r.duration_ms} ms`];
  if (r.timed_out) notes.push('timed out');
  if (r.truncated) notes.push('output truncated');
  parts.push(`[${notes.join(', ')}]`);
  return parts.filter(Boolean).join('\n');
}
