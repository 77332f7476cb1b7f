/** Times the steps of one operation: each `lap(name)` records the ms since the previous one (rounded). */
export function createLaps(): { lap(name: string): void; took: Record<string, number> } {
  const took: Record<string, number> = {};
  let mark = performance.now();
  return {
    took,
    lap(name) {
      const now = performance.now();
      took[name] = Math.round(now - mark);
      mark = now;
    },
  };
}
