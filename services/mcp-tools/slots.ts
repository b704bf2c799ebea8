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
