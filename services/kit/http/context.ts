import type { Principal } from '../identity/principal.js';
import type { RawJsonMembers } from '../json-members.js';

declare module 'express-serve-static-core' {
  interface Request {
    /** Set by `requestContext` on every request: from X-Request-ID or generated. */
    requestId: string;
    /** Set by `identity` when the edge sent identity headers; absent on anonymous public routes. */
    principal?: Principal;
    /** The raw request body bytes, kept by `readJsonBody` with `keepRaw` (signature verification). */
    rawBody?: Buffer;
    /** The bytes of the body's members a route names in `rawMembers`, where they stand for the parsed ones. */
    rawMembers?: RawJsonMembers;
  }
}

export {};
