/**
 * A fixed set of numbered slots taken without waiting: `take()` returns a free slot number or null.
 * Bounds concurrent work without an unbounded queue (callers answer "busy, retry" on null).
 */
export function createSlots(size: number) {
  const free: number[] = Array.from({ length: size }, (_, i) => size - 1 - i);
  return {
    take(): number | null {
      return free.length > 0 ? free.pop()! : null;
    },
    give(slot: number) {
      free.push(slot);
    },
    get inUse() {
      return size - free.length;
    },
    size,
  };
}
export type Slots = ReturnType<typeof createSlots>;

/** How many of `size` shared slots (or threads) one user may hold at once: half, at least one. */
export const perUserShare = (size: number): number => Math.max(1, Math.ceil(size / 2));

/** Why `createSharedSlots().take` gave no slot: every slot is taken, or the user holds their share. */
export type SlotRefusal = { full: true } | { full: false; held: number };

/**
 * Slots shared fairly between users: one user holds at most half of them (at least one), so one
 * user's slow work cannot leave every other user "busy". Tool calls (MCP_MAX_CONCURRENT_CALLS)
 * and every sandbox driver's Python runs (MCP_MAX_CONCURRENT_PYTHON) take theirs here.
 */
export function createSharedSlots(size: number) {
  const slots = createSlots(size);
  const perUser = perUserShare(size);
  const heldBy = new Map<string, number>();
  return {
    /** A free slot number for `userId`, or why there is none (a full set is said first). */
    take(userId: string): number | SlotRefusal {
      const held = heldBy.get(userId) ?? 0;
      if (held < perUser) {
        const slot = slots.take();
        if (slot !== null) {
          heldBy.set(userId, held + 1);
          return slot;
        }
      }
      return slots.inUse === size ? { full: true } : { full: false, held };
    },
    give(userId: string, slot: number) {
      slots.give(slot);
      const left = (heldBy.get(userId) ?? 1) - 1;
      if (left > 0) heldBy.set(userId, left);
      else heldBy.delete(userId);
    },
    perUser,
  };
}
