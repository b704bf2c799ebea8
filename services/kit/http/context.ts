import type { Principal } from '../identity/principal.js';

declare module 'express-serve-static-core' {
  interface Request {
    /** Set by `requestContext` on every request: from X-Request-ID or generated. */
    requestId: string;
    /** Set by `identity` when the edge sent identity headers; absent on anonymous public routes. */
    principal?: Principal;
    /** The raw request body bytes, kept by `readJsonBody` with `keepRaw` (signature verification). */
    rawBody?: Buffer;
  }
}

export {};
