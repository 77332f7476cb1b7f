/**
 * Times the steps of one operation (where a cold suspend's time goes: logged,
 * and printed by the bench): each `lap(name, value)` records the ms since the
 * previous one (rounded) and hands value through.
 */
export function createLaps(): { lap<T>(name: string, value?: T): T; took: Record<string, number> } {
  const took: Record<string, number> = {};
  let mark = performance.now();
  return {
    took,
    lap<T>(name: string, value?: T): T {
      const now = performance.now();
      took[name] = Math.round(now - mark);
      mark = now;
      return value as T;
    },
  };
}
