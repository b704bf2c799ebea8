import type { Response } from 'express';
import { edgeWantsUsageReport, encodeUsageReport, parseSize, projectNamedIn, USAGE_REPORT_HEADER, type UsageReport } from '../../kit/index.js';
import { route, usageReportHandOver, type Route, type RouteCall } from '../../kit/http/index.js';
import { ClientClosed } from '../routing/failover.js';
import { completeChat, type ChatDeps, type ChatInput } from './completions.js';
import { chatCompletionSchema, chatRequestSchema, checkCrossFieldRules, FORWARDED_MEMBERS, type ChatRequest } from './schemas.js';
import type { StreamEvent } from './stream.js';

/**
 * The HTTP side of chat completions: the route table, and the writing of a streamed answer as
 * server-sent events (`: keep-alive` comments while the upstream is quiet, backpressure from the
 * client, `data: [DONE]` at the end). The domain function (completeChat) never sees req or res.
 */
export interface ChatRouteSettings {
  /** Body limit of POST /v1/chat/completions, from validated config (`LLM_CHAT_BODY_LIMIT`). */
  bodyLimit: number;
  /** `LLM_SSE_KEEPALIVE_MS`; 0 = off. */
  keepAliveMs: number;
}

export const defaultChatRouteSettings: ChatRouteSettings = { bodyLimit: parseSize('10mb'), keepAliveMs: 15_000 };

/** `deps` is read only inside the handler, so the table can be built without a running service. */
export function routes(deps: ChatDeps, settings: ChatRouteSettings = defaultChatRouteSettings): Route[] {
  return [
    route<ChatRequest>({
      method: 'post',
      path: '/v1/chat/completions',
      summary: 'Create a chat completion (OpenAI-compatible; JSON or server-sent events with `stream: true`)',
      access: 'user',
      bodyLimit: settings.bodyLimit,
      rawMembers: FORWARDED_MEMBERS,
      request: { body: chatRequestSchema },
      response: { schema: chatCompletionSchema, description: 'A chat.completion object; with `stream: true`, a text/event-stream of chat.completion.chunk objects ending with `data: [DONE]`' },
      handler: (call) => handleCompletion(deps, settings, call),
    }),
  ];
}

async function handleCompletion(deps: ChatDeps, settings: ChatRouteSettings, call: RouteCall<ChatRequest>): Promise<unknown> {
  checkCrossFieldRules(call.body);
  let result;
  const input: ChatInput = { request: call.body, requestId: call.req.requestId, rawMembers: call.req.rawMembers, projectId: projectNamedIn(call.req.headers) };
  try {
    result = await completeChat(deps, call.principal, input, call.cancellation);
  } catch (error) {
    if (error instanceof ClientClosed) return undefined; // nobody left to answer
    throw error;
  } finally {
    // The providers' bodies are built: a stream held for minutes need not keep the request's bytes.
    input.rawMembers = call.req.rawMembers = undefined;
  }
  // The embedded edge logs model, provider and tokens from the report and keeps it from the client:
  // in process it is handed over as it is, over HTTP it is a header (or trailer) the edge removes.
  const toEdge = edgeWantsUsageReport(call.req.headers) ? (usageReportHandOver(call.res) ?? 'encoded') : undefined;
  if (result.kind === 'json') {
    if (result.report) {
      if (toEdge === 'encoded') call.res.setHeader(USAGE_REPORT_HEADER, encodeUsageReport(result.report));
      else toEdge?.(result.report);
      call.res.locals.usageReport = result.report; // for the recent-requests log
    }
    return result.body;
  }
  // Answered meanwhile by someone else (the embedded edge's 504, between the provider's head and
  // here): the client is gone, which the relay must know before writeEventStream closes it.
  if (call.res.headersSent) call.cancellation.abort(new ClientClosed());
  await writeEventStream(call.res, result.events, settings.keepAliveMs, result.report, toEdge);
  return undefined;
}

/**
 * Writes the events as SSE until `done`, an `error` event, or the client leaving. `report` (the
 * stream's usage, settled when the events end) is kept for the requests log and, when the edge
 * asked for it (`reportToEdge`), handed to it in process or sent as the `X-Usage-Report` trailer.
 * A response answered already (the embedded edge's 504) gets nothing: the events are started and
 * closed at once, so the relay still releases its provider and settles its outcome.
 */
export async function writeEventStream(
  res: Response,
  events: AsyncIterable<StreamEvent>,
  keepAliveMs: number,
  report?: Promise<UsageReport>,
  reportToEdge?: 'encoded' | ((report: UsageReport) => void),
): Promise<void> {
  if (res.headersSent || res.writableEnded) {
    // A generator closed before its first step skips its `finally` (the relay's cleanup): one step first.
    for await (const _event of events) break;
    return;
  }
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
    ...(report && reportToEdge === 'encoded' ? { trailer: USAGE_REPORT_HEADER } : {}),
  });
  res.socket?.setNoDelay(true);

  let lastWrite = Date.now();
  let waiting: Promise<void> | null = null;
  // Events parsed from one upstream read arrive in one burst of microtasks: cork the socket for the
  // burst and uncork after it, so they leave in one writev instead of one syscall each (the first
  // event still goes out before the next upstream read, so time to first chunk is unchanged).
  let corked = false;
  const uncork = () => {
    corked = false;
    headHeld = undefined;
    if (!res.writableEnded) res.uncork();
  };
  // The head is held for the first event (usually parsed already from the provider's first read)
  // so both leave in one write; when no event is ready, the head goes alone on the next turn of the
  // event loop, so the client still sees it before the provider's next chunk.
  res.cork();
  corked = true;
  res.flushHeaders();
  let headHeld: NodeJS.Immediate | undefined = setImmediate(uncork);
  const write = (text: string) => {
    lastWrite = Date.now();
    if (!corked) {
      corked = true;
      res.cork();
      process.nextTick(uncork);
    } else if (headHeld) {
      clearImmediate(headHeld);
      headHeld = undefined;
      process.nextTick(uncork);
    }
    if (!res.write(text) && !waiting) {
      waiting = new Promise<void>((resolve) => {
        const release = () => {
          res.off('drain', release);
          res.off('close', release);
          waiting = null;
          resolve();
        };
        res.once('drain', release);
        res.once('close', release);
      });
    }
  };
  const keepAlive =
    keepAliveMs > 0
      ? setInterval(() => {
          if (Date.now() - lastWrite >= keepAliveMs && !res.writableEnded) write(': keep-alive\n\n');
        }, Math.max(Math.floor(keepAliveMs / 2), 5))
      : undefined;

  // The last event is held until the events are closed (which settles the usage), so the trailer can go with it.
  let last: string | undefined;
  try {
    for await (const event of events) {
      if (res.destroyed) break;
      if (event.type === 'raw') write(`${event.text}\n\n`);
      else if (event.type === 'chunk') write(`data: ${JSON.stringify(event.chunk)}\n\n`);
      else {
        last = event.type === 'error' ? `data: ${JSON.stringify({ error: event.error })}\n\n` : 'data: [DONE]\n\n';
        break;
      }
      if (waiting) await waiting;
    }
    if (report && !res.destroyed) {
      const settled = await report;
      res.locals.usageReport = settled; // for the recent-requests log
      if (reportToEdge === 'encoded') res.addTrailers({ [USAGE_REPORT_HEADER]: encodeUsageReport(settled) });
      else reportToEdge?.(settled);
    }
    if (!res.writableEnded) res.end(last);
  } finally {
    clearInterval(keepAlive);
    if (headHeld) {
      clearImmediate(headHeld);
      uncork();
    }
  }
}
