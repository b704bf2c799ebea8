import type { Agent } from 'undici';

/**
 * undici frees a connection one turn of the event loop after its answer ended (setImmediate), for
 * any pool: waits, turn by turn (bounded), until the agent counts `n` free connections to `origin`.
 */
export async function untilFree(agent: Agent, origin: string, n: number): Promise<void> {
  for (let turn = 0; turn < 1000; turn++) {
    const stats = (agent.stats as Record<string, { free: number }>)[origin];
    if ((stats?.free ?? 0) >= n) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`fewer than ${n} connections to ${origin} became free`);
}
