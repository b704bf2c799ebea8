import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { formatPath, storableText, systemClock, type Clock, type Logger } from '../../kit/index.js';
import { SandboxBusyError, SandboxUnavailableError } from '../sandbox/index.js';
import { createSharedSlots } from '../slots.js';
import type { ToolCatalog } from './catalog.js';
import type { CallOutcome, ToolMetrics } from './metrics.js';
import { PROGRESS_INTERVAL_MS, reportProgressEvery, systemTimers, type ProgressTimers } from './progress.js';
import { ToolFailure, type ToolCallContext } from './tool.js';

/**
 * `tools/call` for every tool: name and argument checks (JSON-RPC invalid-params), the enabled
 * switch, the per-process concurrency bound, metrics and one log line per call. The log line has
 * the tool, the user, the duration and the outcome, never the arguments or the output.
 */
export interface ToolSwitches {
  isEnabled(name: string): boolean;
}

export interface CallToolDeps {
  catalog: ToolCatalog;
  switches: ToolSwitches;
  metrics: ToolMetrics;
  logger: Logger;
  maxConcurrentCalls: number;
  /** Passes a cancel naming no call in flight here to the other replicas (`cancel-relay.ts`); none: cancels stay in this process. */
  cancelElsewhere?: (userId: string, requestId: string | number, reason: string | undefined) => void;
  /** When each call started, for a cancel issued before that (`cancelHere`'s `heldMs`). */
  clock?: Clock;
  /** How often a call whose client asked for progress reports it (`MCP_PROGRESS_INTERVAL_MS`). */
  progressIntervalMs?: number;
  timers?: ProgressTimers;
}

/**
 * A call that started up to this long after the client's cancel arrived on another replica is still
 * the one it named: the call and its cancel race each other over separate requests, and the clock
 * of the replica that kept the cancel (which measured how long) may have been stepped meanwhile.
 */
export const HELD_CANCEL_ALLOWANCE_MS = 2000;

/**
 * Cancels naming no call in this process that one user may pass to the other replicas per window.
 * Each one passed on is a broker publish every replica consumes, and nothing here can tell whether
 * the id names a call running elsewhere (the server keeps no session): without a bound, one POST of
 * a batch of cancels for made-up ids made as many publishes. A client cancels the calls it started,
 * a few at a time; one user runs at most half of `MCP_MAX_CONCURRENT_CALLS` per replica.
 */
export const RELAYED_CANCELS_PER_USER = 16;
export const RELAYED_CANCELS_WINDOW_MS = 10_000;

export interface ToolCaller {
  (ctx: ToolCallContext, name: string, args: unknown): Promise<CallToolResult>;
  /**
   * Cancels the call `userId` has in flight in this process under `requestId` (the client's
   * `notifications/cancelled`, which arrives in a request of its own: the server is stateless).
   * Nothing happens here when there is more than one (two clients of the user reusing an id: which
   * one was meant is unknown). When there is none, the cancel goes to the other replicas
   * (`cancelElsewhere`): the call may run on one of them, up to `RELAYED_CANCELS_PER_USER` per
   * user per window; past it the cancel is dropped. Returns whether a call here was cancelled.
   */
  cancel(userId: string, requestId: string | number, reason?: string): boolean;
  /**
   * The same, in this process only: a cancel another replica passed on. With `heldMs` (how long
   * that replica kept it before publishing, by its own clock; 0 when it went out at once), a call
   * that started more than `HELD_CANCEL_ALLOWANCE_MS` after `heldMs` ago, by this process's clock,
   * is not the one it named: a cancel kept while the broker was away may arrive after the call ended
   * and the same user's next call reused its id. A duration, not the other replica's time of day:
   * replicas' clocks are never compared, so one running ahead cannot make a prompt cancel miss.
   * A cancel naming no call here, kept at most `HELD_CANCEL_ALLOWANCE_MS` by the other replica, is
   * kept for this process's open POSTs of the user as a local one is (`admit`): the call it names
   * may be in one of them, its body still being read.
   */
  cancelHere(userId: string, requestId: string | number, reason?: string, heldMs?: number): boolean;
  /**
   * A POST of `userId` has arrived (its body not read yet); returns its admission number, which its
   * calls carry (`ToolCallContext.admission`), and `release` is called once it is answered. A cancel
   * naming none of the user's calls in flight while one of their POSTs is still open is kept (at
   * most `EARLY_CANCELS_PER_USER`) until those POSTs are answered: the call it names may be in one
   * of them, overtaken by its cancel (two requests, two connections; a large body takes longer
   * to read than a cancel). Such a call is answered cancelled when it starts, and runs nothing. Only
   * a call whose POST arrived before the cancel is matched, so a later call reusing the id is not.
   */
  admit(userId: string): number;
  release(userId: string, admission: number): void;
}

/** Cancels kept per user for calls whose POST is still being read; past it the oldest is dropped. */
export const EARLY_CANCELS_PER_USER = 16;

export function createToolCaller(deps: CallToolDeps): ToolCaller {
  // One user never holds more than half the slots (at least one), so a user with many slow calls
  // in flight cannot leave every other user "busy".
  const slots = createSharedSlots(deps.maxConcurrentCalls);
  const clock = deps.clock ?? systemClock;
  const progressIntervalMs = deps.progressIntervalMs ?? PROGRESS_INTERVAL_MS;
  const timers = deps.timers ?? systemTimers;
  const inFlight = new Map<string, Array<{ controller: AbortController; startedAt: number }>>();
  const callKey = (userId: string, requestId: string | number) => JSON.stringify([userId, requestId]);
  // Cancels passed on per user in the current window. The map is emptied when the window ends, so
  // it holds only the users who cancelled something elsewhere within the last window.
  const relayed = new Map<string, number>();
  let windowStart = clock.now();
  const mayRelay = (userId: string): boolean => {
    const now = clock.now();
    // A clock stepped back starts a new window too, rather than stretching the current one.
    if (now - windowStart >= RELAYED_CANCELS_WINDOW_MS || now < windowStart) {
      relayed.clear();
      windowStart = now;
    }
    const count = relayed.get(userId) ?? 0;
    if (count >= RELAYED_CANCELS_PER_USER) return false;
    relayed.set(userId, count + 1);
    // Said once per user and window, when the budget runs out (a warning per cancel would let the client flood the log instead).
    if (count + 1 === RELAYED_CANCELS_PER_USER) deps.logger.warn({ user_id: userId, max: RELAYED_CANCELS_PER_USER, window_ms: RELAYED_CANCELS_WINDOW_MS }, 'cancels for calls not running here: this user reached the most passed to other replicas per window; more are dropped');
    return true;
  };
  // Admission numbers of each user's POSTs not answered yet, and the cancels that arrived while one
  // was open (the call key, and the admission number current when the cancel came).
  let admissions = 0;
  const open = new Map<string, Set<number>>();
  const early = new Map<string, Map<string, number>>();
  const keepEarly = (userId: string, key: string) => {
    if (!open.has(userId)) return;
    const kept = early.get(userId) ?? new Map<string, number>();
    kept.delete(key);
    if (kept.size >= EARLY_CANCELS_PER_USER) kept.delete(kept.keys().next().value as string);
    kept.set(key, ++admissions);
    early.set(userId, kept);
  };
  /** Whether a cancel arrived, after this call's POST did, for a call under `key`: it is consumed. */
  const cancelledEarly = (ctx: ToolCallContext, key: string): boolean => {
    const kept = early.get(ctx.userId);
    const at = kept?.get(key);
    if (at === undefined || ctx.admission === undefined || at < ctx.admission) return false;
    kept!.delete(key);
    return true;
  };
  const call = async (ctx: ToolCallContext, name: string, args: unknown): Promise<CallToolResult> => {
    const tool = deps.catalog.get(name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${String(name).slice(0, 100)}`, { param: 'name' });
    const started = performance.now();
    const finish = (outcome: CallOutcome, result: CallToolResult, detail?: string) => {
      const seconds = (performance.now() - started) / 1000;
      deps.metrics.record(name, outcome, seconds);
      deps.logger[outcome === 'ok' ? 'info' : 'warn'](
        { tool: name, user_id: ctx.userId, duration_ms: Math.round(seconds * 1000), outcome, ...(detail ? { detail } : {}) },
        'mcp tool call',
      );
      return result;
    };
    const parsed = tool.input.safeParse(args ?? {});
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const param = formatPath(['arguments', ...issue.path]);
      const message = `Invalid arguments for tool ${name}: '${param}': ${issue.message}`;
      if (ctx.argumentErrorsAsResults) return finish('invalid', errorResult(message), param);
      finish('invalid', errorResult(''), param);
      throw new McpError(ErrorCode.InvalidParams, message, { param });
    }
    if (!deps.switches.isEnabled(name)) return finish('disabled', errorResult(`The tool ${name} is disabled by an administrator`));
    const key = ctx.requestId === undefined ? null : callKey(ctx.userId, ctx.requestId);
    if (key !== null && cancelledEarly(ctx, key)) return finish('error', errorResult('The call was cancelled'));
    const slot = slots.take(ctx.userId);
    if (typeof slot !== 'number') {
      const message = slot.full ? `mcp-tools is busy (${deps.maxConcurrentCalls} calls in progress); retry shortly` : `You have ${slot.held} tool calls in progress, the most one user may run at once; retry shortly`;
      return finish('busy', errorResult(message));
    }
    const cancelled = new AbortController();
    if (key !== null) inFlight.set(key, [...(inFlight.get(key) ?? []), { controller: cancelled, startedAt: clock.now() }]);
    const signal = AbortSignal.any([ctx.signal, cancelled.signal]);
    const stopProgress = ctx.reportProgress ? reportProgressEvery(ctx.reportProgress, progressIntervalMs, timers, name) : undefined;
    try {
      // An output is what the tool did, even when the cancel came meanwhile: a file_search_index
      // whose document was committed as the cancel arrived answers that it was indexed, not that
      // nothing happened. A tool the cancel stopped throws instead (python_exec's killed run too).
      const output = await tool.run({ ...ctx, signal }, parsed.data);
      // What a page, a program or a search backend gave back may hold what the platform refuses in
      // every request (a NUL, an unpaired surrogate): a client passing the result on to the chat API
      // would be refused there, so it becomes U+FFFD here, as a provider's answer does.
      return finish('ok', {
        content: [{ type: 'text', text: storableText(output.text) }],
        structuredContent: storable(output.structured) as Record<string, unknown>,
      });
    } catch (error) {
      if (error instanceof SandboxBusyError) return finish('busy', errorResult(error.message));
      if (error instanceof ToolFailure || error instanceof SandboxUnavailableError) return finish('error', errorResult(error.message), error.message);
      // A tool that throws once cancelled has no result to give: the cancel stopped it.
      if (signal.aborted) return finish('error', errorResult('The call was cancelled'));
      deps.logger.error({ tool: name, user_id: ctx.userId, err: (error as Error).message }, 'mcp tool failed unexpectedly');
      return finish('error', errorResult(`The tool ${name} failed unexpectedly; the failure was logged`));
    } finally {
      stopProgress?.();
      if (key !== null) {
        const others = inFlight.get(key)!.filter((c) => c.controller !== cancelled);
        if (others.length > 0) inFlight.set(key, others);
        else inFlight.delete(key);
      }
      slots.give(ctx.userId, slot);
    }
  };
  const stopHere = (key: string, reason?: string, heldMs?: number) => {
    const all = inFlight.get(key);
    const latestStart = heldMs === undefined ? undefined : clock.now() - heldMs + HELD_CANCEL_ALLOWANCE_MS;
    const calls = latestStart === undefined ? all : all?.filter((c) => c.startedAt <= latestStart);
    if (calls?.length !== 1) return false;
    calls[0]!.controller.abort(new Error(reason ?? 'cancelled by the client'));
    return true;
  };
  return Object.assign(call, {
    cancel(userId: string, requestId: string | number, reason?: string) {
      const key = callKey(userId, requestId);
      if (!inFlight.has(key)) {
        keepEarly(userId, key);
        if (deps.cancelElsewhere && mayRelay(userId)) deps.cancelElsewhere(userId, requestId, reason);
        return false;
      }
      return stopHere(key, reason);
    },
    cancelHere(userId: string, requestId: string | number, reason?: string, heldMs?: number) {
      const key = callKey(userId, requestId);
      // The call's POST may have reached this replica and still be read (a large body) while its
      // cancel reached another one: kept here as there. Only a cancel relayed promptly: one the
      // other replica kept (its broker away) may name a call long over whose id a newer call of a
      // POST open now reuses. No age (an older replica's message) counts as prompt, as in `stopHere`.
      if (!inFlight.has(key)) {
        if (heldMs === undefined || heldMs <= HELD_CANCEL_ALLOWANCE_MS) keepEarly(userId, key);
        return false;
      }
      return stopHere(key, reason, heldMs);
    },
    admit(userId: string) {
      const admission = ++admissions;
      const mine = open.get(userId) ?? new Set<number>();
      mine.add(admission);
      open.set(userId, mine);
      return admission;
    },
    release(userId: string, admission: number) {
      const mine = open.get(userId);
      if (!mine?.delete(admission)) return;
      if (mine.size === 0) {
        open.delete(userId);
        early.delete(userId);
        return;
      }
      // A kept cancel matches only calls of POSTs that arrived before it: none left once every
      // POST still open arrived after it.
      const oldest = Math.min(...mine);
      const kept = early.get(userId);
      for (const [key, at] of kept ?? []) if (at < oldest) kept!.delete(key);
    },
  });
}

export const errorResult = (message: string): CallToolResult => ({ content: [{ type: 'text', text: storableText(message) }], isError: true });

/** `value` (JSON-like: a tool's structured output) with every string and key made storable (`storableText`). */
function storable(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (Array.isArray(value)) return value.map(storable);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, item]) => [storableText(key), storable(item)]));
  return value;
}
