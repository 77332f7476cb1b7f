import { describe, expect, it } from "vitest";
import { CoalescedReads } from "./coalesce.ts";

describe("coalesced reads", () => {
  it("shares one read among callers that asked before it was sent, and only those", async () => {
    const sent: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const reads = new CoalescedReads(async (key) => {
      sent.push(key);
      await gate;
      return `${key}@${sent.length}`;
    });
    const first = [reads.get("a"), reads.get("a"), reads.get("b")];
    // Let the reads go out; a caller asking now must not get a value read before it asked.
    await new Promise<void>((r) => setImmediate(r));
    expect(sent).toEqual(["a", "b"]);
    const later = reads.get("a");
    release();
    expect(await Promise.all(first)).toEqual(["a@2", "a@2", "b@2"]);
    expect(await later).toBe("a@3");
    expect(sent).toEqual(["a", "b", "a"]);
  });

  it("hands a failed read to every caller that shared it", async () => {
    const reads = new CoalescedReads<string>(() => Promise.reject(new Error("down")));
    const results = await Promise.allSettled([reads.get("a"), reads.get("a")]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
  });
});
