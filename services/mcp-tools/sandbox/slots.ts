import { createSharedSlots } from '../slots.js';
import { SandboxBusyError } from './types.js';

/**
 * The python_exec bound (MCP_MAX_CONCURRENT_PYTHON) as every sandbox driver takes it: the shared
 * slots (one user at most half of them), a refusal thrown as SandboxBusyError. Runs that name no
 * user count as one user.
 */
export function createRunSlots(size: number) {
  const slots = createSharedSlots(size);
  return {
    take(userId = ''): number {
      const taken = slots.take(userId);
      if (typeof taken === 'number') return taken;
      if (taken.full) throw new SandboxBusyError();
      throw new SandboxBusyError(`python_exec is busy: you have ${taken.held} run${taken.held === 1 ? '' : 's'} in progress, the most one user may run at once; retry shortly`);
    },
    give(userId = '', slot: number) {
      slots.give(userId, slot);
    },
  };
}
