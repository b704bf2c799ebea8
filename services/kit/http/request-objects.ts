import express, { type Express } from 'express';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { UsageReport } from '../usage-report.js';

/**
 * The request and response objects of every server the kit listens with (`listen`): Node's own,
 * whose classes carry Express's request and response members from the start.
 *
 * Why: Express gives each request its members by changing the prototype of Node's `req` and `res`
 * (`Object.setPrototypeOf`) in every app it passes. V8 handles an object whose prototype changed
 * after it was built far worse: in a bare Node server that does nothing else, that change alone
 * halved the requests served per second, and the garbage collector moved every such request's
 * objects into the old generation instead of freeing them young (2.3 MiB promoted per scavenge
 * against none). On the chat path it was most of the ~18 KiB each request left to the old
 * generation (bench/README.md, "Seventh pass"). Built with these classes, `req` and `res` already
 * have the prototype every service app gives them, so Express's own prototype change is a no-op.
 *
 * The members are Express's, copied unchanged; what Express reads from its per-app prototypes
 * (`req.app`, `res.app`) is set on the objects by `adoptRequestObjects`, for each app a request
 * passes. Objects built elsewhere (a test's own server) get these prototypes from Express as before.
 */
export class ServiceRequest extends IncomingMessage {}

/**
 * A caller in the same process that handed a request to a service's handler and watches its answer
 * (the embedded edge, `gateway/in-process.ts`): it sees the head before it is written, each write,
 * and the trailers, which it takes instead of the client.
 */
export interface ResponseObserver {
  /** Before the head is written; `args` are those of `writeHead` (the headers object, if any, may be edited). */
  head(res: ServiceResponse, args: unknown[]): void;
  wrote(): void;
  trailers(trailers: Record<string, unknown>): void;
  /** The service's usage report as it is (`usageReportHandOver`), instead of a header or trailer to encode and decode. */
  usage(report: UsageReport): void;
}

/**
 * Where a route hands its usage report when the edge asked for one (`edgeWantsUsageReport`): the
 * observing edge in this process takes the object itself; undefined when the answer goes over
 * HTTP, where the report travels as the `X-Usage-Report` header (JSON) or trailer (a stream).
 */
export function usageReportHandOver(res: ServerResponse): ((report: UsageReport) => void) | undefined {
  const observer = res instanceof ServiceResponse ? res.observer : undefined;
  return observer && ((report) => observer.usage(report));
}

export class ServiceResponse<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {
  /**
   * Set while a caller in this process watches the answer. A field of every response rather than
   * methods patched onto one: replacing `writeHead` or `write` on a response object costs it as
   * dearly as a prototype change does (see above).
   */
  observer: ResponseObserver | undefined = undefined;

  /** What `whenClosed` runs when the response closes, in order; undefined until the first is added. */
  closeHooks: Array<() => void> | undefined = undefined;
}

/** A response's hooks once they ran: a hook added later (even by one of them) is not run, as with the emitter. */
const RAN: Array<() => void> = [];

/**
 * Runs `hook` once when `res` closes (its 'close' event: the answer is done or the client left),
 * after the hooks added before it. Several layers watch the end of every request (the edge's
 * access log and in-process hand-off, the service's log, metrics, request log and cancellation).
 * `res.once` for each would cost a wrapper, a bound function and a state object per call, plus the
 * emitter's array of them, all kept for as long as the request runs, which is what the collector
 * copies while the request waits on its provider. On the kit's responses all hooks share one
 * listener. Other responses (a test's own server) get `res.once('close', hook)`. As with the
 * emitter, a hook added once the response has closed never runs, and a hook that throws stops
 * the ones after it.
 */
export function whenClosed(res: ServerResponse, hook: () => void): void {
  if (!(res instanceof ServiceResponse)) {
    res.once('close', hook);
    return;
  }
  const hooks = res.closeHooks;
  if (hooks === RAN) return;
  if (hooks) {
    hooks.push(hook);
    return;
  }
  res.closeHooks = [hook];
  res.on('close', runCloseHooks);
}

/** The one 'close' listener of a kit response (shared by all of them: no closure per response). */
function runCloseHooks(this: ServiceResponse): void {
  const hooks = this.closeHooks;
  if (!hooks || hooks === RAN) return;
  this.closeHooks = RAN;
  for (const hook of hooks) hook();
}

function copyMembers(target: object, source: object): void {
  for (const key of Reflect.ownKeys(source)) {
    if (key === 'constructor') continue;
    Object.defineProperty(target, key, Object.getOwnPropertyDescriptor(source, key)!);
  }
}
copyMembers(ServiceRequest.prototype, express.request);
copyMembers(ServiceResponse.prototype, express.response);

const node = ServerResponse.prototype as unknown as Record<'writeHead' | 'write' | 'addTrailers', (...args: unknown[]) => unknown>;
Object.assign(ServiceResponse.prototype, {
  writeHead(this: ServiceResponse, ...args: unknown[]) {
    this.observer?.head(this, args);
    return node.writeHead.apply(this, args);
  },
  write(this: ServiceResponse, ...args: unknown[]) {
    this.observer?.wrote();
    return node.write.apply(this, args);
  },
  addTrailers(this: ServiceResponse, trailers: Record<string, unknown>) {
    if (this.observer) this.observer.trailers(trailers);
    else node.addTrailers.call(this, trailers);
  },
});

/** Options of `http.createServer` that build requests and responses as `ServiceRequest` and `ServiceResponse`. */
export const serviceHttpObjects = { IncomingMessage: ServiceRequest, ServerResponse: ServiceResponse } as const;

type Handle = (this: Express, req: IncomingMessage, res: ServerResponse, callback?: (error?: unknown) => void) => void;
type AppMembers = { request: object; response: object; handle: Handle };

/**
 * Makes `app` give its requests the shared prototypes above (a no-op for objects already built with
 * them) and set `req.app` and `res.app`, which Express's members read, on the objects themselves.
 * Mounted inside another app, the request is handed back with the outer app's `app` again, as Express
 * would; such an app gets prototypes of its own first, since Express then chains them to the parent's.
 */
export function adoptRequestObjects(app: Express): void {
  const members = app as unknown as AppMembers;
  members.request = ServiceRequest.prototype;
  members.response = ServiceResponse.prototype;
  app.prependListener('mount', function ownPrototypes(this: Express) {
    const mounted = this as unknown as AppMembers;
    mounted.request = Object.create(ServiceRequest.prototype) as object;
    mounted.response = Object.create(ServiceResponse.prototype) as object;
  });
  const viaExpress = members.handle;
  members.handle = function handle(req, res, callback) {
    const request = req as { app?: unknown };
    const response = res as { app?: unknown };
    const outer = { request: request.app, response: response.app };
    request.app = this;
    response.app = this;
    if (callback === undefined) return viaExpress.call(this, req, res);
    return viaExpress.call(this, req, res, (error) => {
      request.app = outer.request;
      response.app = outer.response;
      callback(error);
    });
  };
}
