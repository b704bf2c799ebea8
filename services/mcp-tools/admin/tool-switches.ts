import { runEvery, type Logger, type Periodic } from '../../kit/index.js';
import type { ToolSwitches } from '../tools/call-tool.js';
import type { ToolSettingRow, ToolSettingsStore } from './store.js';

/**
 * This process's copy of the tool switches. Reads are in memory (tools/list and tools/call never
 * wait on the database); the copy is refreshed from the shared table every MCP_TOOL_STATE_REFRESH_MS,
 * so a switch flipped through any process reaches every process within that interval, and at once
 * in the process that flipped it. When a refresh fails, the last known state stays in force.
 * A refresh whose read began before a local flip may carry the row from before it; the flip wins
 * over that snapshot, and the next refresh (read after the flip committed) takes the table again.
 * Reads can overlap when the database is slower than the interval: one that lands after a later
 * read has landed is dropped.
 */
export interface ToolSwitchboard extends ToolSwitches {
  state(name: string): ToolSettingRow | undefined;
  apply(row: ToolSettingRow): void;
  refresh(): Promise<void>;
  start(): Promise<void>;
  /** Cancels the next refresh and waits for one in progress. */
  stop(): Promise<void>;
}

export function createToolSwitchboard(deps: { store: ToolSettingsStore; refreshMs: number; logger: Logger }): ToolSwitchboard {
  let rows = new Map<string, ToolSettingRow>();
  let periodic: Periodic | undefined;
  let failing = false;
  // One sequence orders local flips and the starts of reads: a read keeps the rows flipped after it
  // began, and is dropped when a read that began after it has landed.
  let sequence = 0;
  let landed = 0;
  const flippedAt = new Map<string, number>();
  const board: ToolSwitchboard = {
    isEnabled: (name) => rows.get(name)?.enabled ?? true,
    state: (name) => rows.get(name),
    apply(row) {
      rows.set(row.name, row);
      flippedAt.set(row.name, ++sequence);
    },
    async refresh() {
      const read = ++sequence;
      const fresh = new Map((await deps.store.all()).map((row) => [row.name, row]));
      if (read < landed) return;
      landed = read;
      for (const [name, at] of flippedAt) {
        const flipped = rows.get(name);
        if (at > read && flipped) fresh.set(name, flipped);
        else flippedAt.delete(name);
      }
      rows = fresh;
    },
    async start() {
      await board.refresh();
      // The next refresh is counted from the end of the last, so a stalled database never has two reads out from the timer.
      periodic ??= runEvery(
        deps.refreshMs,
        async () => {
          await board.refresh();
          if (failing) deps.logger.info('tool switches refreshed again');
          failing = false;
        },
        (error) => {
          if (!failing) deps.logger.warn({ err: error.message }, 'tool switches could not be refreshed; keeping the last known state');
          failing = true;
        },
      );
    },
    async stop() {
      const stopping = periodic?.stop();
      periodic = undefined;
      await stopping;
    },
  };
  return board;
}
