import { describe, expect, it } from "vitest";
import { createUidAllocator, pidsOfUid, uidHasProcesses, UidRangeError } from "./uid-allocator.ts";

describe("createUidAllocator", () => {
  it("gives live sessions distinct uids from the range, skipping reserved ones and ones that still own processes", () => {
    const busy = new Set([1002]);
    const uids = createUidAllocator({ first: 1000, count: 5, reserved: [1001], inUse: (u) => busy.has(u) });
    const got = ["a", "b", "c"].map((s) => uids.allocate(s));
    expect(got.map((g) => g.uid)).toEqual([1000, 1003, 1004]);
    expect(got.map((g) => g.slot)).toEqual([0, 3, 4]);
    expect(got.every((g) => g.gid === g.uid)).toBe(true);
    expect(uids.allocate("a")).toEqual(got[0]);
  });

  it("refuses with a typed error when the range is used up, and hands a released uid out again", () => {
    const uids = createUidAllocator({ first: 2000, count: 2, reserved: [], inUse: () => false });
    uids.allocate("a");
    uids.allocate("b");
    expect(() => uids.allocate("c")).toThrow(UidRangeError);
    uids.release("a");
    expect(uids.allocate("c").uid).toBe(2000);
    expect(uids.get("a")).toBeUndefined();
  });

  it("refuses a range that starts at root", () => {
    expect(() => createUidAllocator({ first: 0, count: 10, reserved: [] })).toThrow(UidRangeError);
  });

  it("sees which uids own processes on this host", () => {
    const own = process.getuid?.() ?? 0;
    expect(pidsOfUid(own)).toContain(process.pid);
    expect(uidHasProcesses(own)).toBe(true);
    expect(uidHasProcesses(3_999_999_000)).toBe(false);
  });
});
