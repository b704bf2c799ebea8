/**
 * The sandbox behind python_exec. Drivers (bubblewrap on this host, a remote SandboxFusion-style
 * service) share this interface; the tool never runs code any other way.
 */
export interface PythonRun {
  code: string;
  stdin?: string;
  timeoutMs: number;
  signal?: AbortSignal;
  /** The user the run is for: one user holds at most half of the driver's slots (runs without one count as one user). */
  userId?: string;
}

export interface PythonResult {
  stdout: string;
  stderr: string;
  exit_code: number;
  duration_ms: number;
  timed_out: boolean;
  truncated: boolean;
}

export interface SandboxDriver {
  readonly name: string;
  /** What a run may use, as python_exec's description tells the model: memory (null: the remote service decides) and output per stream. */
  readonly limits: { memoryMb: number | null; outputLimitBytes: number };
  /** Why this driver cannot run code here (e.g. bwrap missing), or null when it can. */
  unavailableReason(): string | null;
  /** Runs the code; throws SandboxBusyError when every slot is taken, or the user already holds their share of them. */
  run(input: PythonRun): Promise<PythonResult>;
  close?(): Promise<void>;
}

export class SandboxBusyError extends Error {
  constructor(message = 'python_exec is busy: every sandbox slot is in use; retry shortly') {
    super(message);
    this.name = 'SandboxBusyError';
  }
}

export class SandboxUnavailableError extends Error {
  constructor(reason: string) {
    super(`python_exec is unavailable: ${reason}. Code is never run outside the sandbox.`);
    this.name = 'SandboxUnavailableError';
  }
}
