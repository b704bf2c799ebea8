import type { ExecutionContext } from 'ava';
import type { TestPlatform } from './platform.js';
import type { FigureRow } from './reliability-figures.js';

/**
 * Continuous writes through the edge while a test breaks a dependency: each worker creates
 * conversations (a conversation and its first item, one transaction) one after another until
 * `stop()`. Every answer is kept; a request that gets no answer within `answerWithinMs` is aborted
 * and recorded as status 0, which the reliability tests count as a hang.
 */
export interface WriteOutcome {
  n: number;
  status: number;
  body: any;
}

export interface WriteLoad {
  outcomes: WriteOutcome[];
  /** The bound given to `startConversationWrites`: status 0 means no answer within it. */
  answerWithinMs: number;
  count(predicate: (o: WriteOutcome) => boolean): number;
  stop(): Promise<void>;
}

export const guestToken = async (p: TestPlatform): Promise<string> =>
  ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;

export function writeText(n: number): string {
  return `write #${n};`;
}

export function startConversationWrites(p: TestPlatform, token: string, options: { workers: number; answerWithinMs: number }): WriteLoad {
  const outcomes: WriteOutcome[] = [];
  let sent = 0;
  let stopped = false;
  const write = async (n: number): Promise<WriteOutcome> => {
    try {
      const res = await fetch(`${p.url}/v1/conversations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ metadata: { n: String(n) }, items: [{ type: 'message', role: 'user', content: writeText(n) }] }),
        signal: AbortSignal.timeout(options.answerWithinMs),
      });
      const text = await res.text();
      let body: any = text;
      try {
        body = JSON.parse(text);
      } catch {
        // Not JSON: kept as text, and the test reports it.
      }
      return { n, status: res.status, body };
    } catch (error) {
      const cause = (error as Error & { cause?: Error }).cause;
      return { n, status: 0, body: `${(error as Error).name}: ${cause?.message ?? (error as Error).message}` };
    }
  };
  const running = Promise.all(
    Array.from({ length: options.workers }, async () => {
      while (!stopped) {
        const n = sent++;
        outcomes.push(await write(n));
      }
    }),
  );
  return {
    outcomes,
    answerWithinMs: options.answerWithinMs,
    count: (predicate) => outcomes.filter(predicate).length,
    async stop() {
      stopped = true;
      await running;
    },
  };
}

/** Answers that are neither a success nor the clean 503 `service_unavailable` in the error body. */
export function unexpectedAnswers(outcomes: WriteOutcome[]): string[] {
  return outcomes
    .filter((o) => !(o.status >= 200 && o.status < 300) && !isClean503(o))
    .map((o) => `#${o.n}: ${o.status} ${JSON.stringify(o.body).slice(0, 200)}`);
}

export function isClean503(o: WriteOutcome): boolean {
  const error = o.body?.error;
  return o.status === 503 && error?.type === 'internal_error' && error?.code === 'service_unavailable' && typeof error?.message === 'string' && typeof error?.request_id === 'string';
}

/** Writes that were answered 2xx but whose conversation or first item cannot be read back. */
export async function missingWrites(p: TestPlatform, token: string, outcomes: WriteOutcome[]): Promise<string[]> {
  const missing: string[] = [];
  for (const o of outcomes.filter((x) => x.status >= 200 && x.status < 300)) {
    const id = o.body?.id;
    const headers = { authorization: `Bearer ${token}` };
    const conversation = id ? await fetch(`${p.url}/v1/conversations/${id}`, { headers }).then((r) => r.json() as Promise<any>) : undefined;
    const items = id ? await fetch(`${p.url}/v1/conversations/${id}/items?order=asc`, { headers }).then((r) => r.json() as Promise<any>) : undefined;
    const stored = conversation?.metadata?.n === String(o.n) && (items?.data ?? []).some((item: any) => JSON.stringify(item.content).includes(writeText(o.n)));
    if (!stored) missing.push(`#${o.n} (${id ?? 'no id'})`);
  }
  return missing;
}

/**
 * Once `load` has stopped: adds its outcomes to `row` (requests, clean 503s, other 5xx, accepted
 * writes that cannot be read back) and asserts that every answer was a 2xx or a clean 503 and
 * that every accepted write is readable. Whether both held: only then was the fault survived.
 */
export async function checkWrites(t: ExecutionContext, p: TestPlatform, token: string, load: WriteLoad, row: FigureRow): Promise<boolean> {
  const unexpected = unexpectedAnswers(load.outcomes);
  const missing = await missingWrites(p, token, load.outcomes);
  const refused = load.count(isClean503);
  row.requestsChecked += load.outcomes.length;
  row.refused503 += refused;
  row.fiveXx += load.count((o) => o.status >= 500 && !isClean503(o));
  row.itemsLost += missing.length;
  t.deepEqual(unexpected.slice(0, 5), [], `${unexpected.length} answers neither 2xx nor a clean 503 (status 0: no answer within ${load.answerWithinMs} ms)`);
  t.deepEqual(missing.slice(0, 5), [], `${missing.length} writes answered 2xx are not readable`);
  t.log(`${load.outcomes.length} writes: ${load.count((o) => o.status >= 200 && o.status < 300)} accepted, ${refused} refused with 503`);
  return unexpected.length === 0 && missing.length === 0;
}
