import type { Logger } from '../../kit/index.js';
import type { McpConfig } from '../config.js';
import { createBwrapSandbox } from './bwrap.js';
import { createRemoteSandbox } from './remote.js';
import type { SandboxDriver } from './types.js';

export * from './types.js';

/** The driver configuration selects: a remote run_code service when SANDBOX_URL is set, else bubblewrap. */
export async function createSandbox(config: McpConfig, logger: Logger): Promise<SandboxDriver> {
  if (config.SANDBOX_URL) {
    return createRemoteSandbox({ url: config.SANDBOX_URL, slots: config.MCP_MAX_CONCURRENT_PYTHON, outputLimitBytes: config.SANDBOX_OUTPUT_LIMIT_BYTES });
  }
  return createBwrapSandbox({
    bwrapPath: config.SANDBOX_BWRAP_PATH,
    pythonPath: config.SANDBOX_PYTHON,
    uidBase: config.SANDBOX_UID_BASE,
    slots: config.MCP_MAX_CONCURRENT_PYTHON,
    memoryMb: config.SANDBOX_MEMORY_MB,
    maxProcesses: config.SANDBOX_MAX_PROCESSES,
    maxFileMb: config.SANDBOX_MAX_FILE_MB,
    tmpMb: config.SANDBOX_TMP_MB,
    outputLimitBytes: config.SANDBOX_OUTPUT_LIMIT_BYTES,
    logger,
  });
}
