// Preloaded into the Portkey process only (`node --import`). Portkey 1.15.2 with the
// @hono/node-server it resolves here (1.19) answers every streamed chat completion with a 500:
// it appends its x-portkey-* headers to a Response whose headers are immutable
// (Portkey-AI/gateway issues #1389 and #1550). This lets those appends and deletes on an immutable
// header list be skipped instead of throwing, so the peer streams; nothing else changes.
for (const name of ['append', 'set', 'delete']) {
  const original = Headers.prototype[name];
  Headers.prototype[name] = function (...args) {
    try {
      return original.apply(this, args);
    } catch (error) {
      if (error instanceof TypeError && error.message === 'immutable') return undefined;
      throw error;
    }
  };
}
