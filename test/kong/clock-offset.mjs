// Preloaded into Kong's plugin server by the harness (`node --import <this file>?ms=<offset>`):
// moves the process's clock by a fixed offset, as `offsetClock(offset)` (services/kit/clock.ts)
// moves the in-process edge's. The plugin server is a process of its own that no test Clock
// reaches, and the plugins there read time through the kit's `systemClock`, which calls
// `Date.now()` at every read: shifting `Date.now` shifts their windows, expiries and caches.
// A test gives both hosts the offset `offsetToNextMinute()` returned, so both count in one minute
// window from its first second, and never waits on the wall clock for a fresh one.
const offset = Number(new URL(import.meta.url).searchParams.get('ms'));
if (!Number.isFinite(offset)) throw new Error(`clock-offset.mjs: ?ms=<milliseconds> required, got ${import.meta.url}`);
const realNow = Date.now;
Date.now = () => realNow() + offset;
