import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { claimHeld, createUidAllocator, pidsOfUid, uidHasProcesses, UidRangeError } from "./uid-allocator.ts";

const claimDir = () => mkdtempSync(join(tmpdir(), "paddock-uid-claims-"));

describe("createUidAllocator", () => {
  it("gives live sessions distinct uids from the range, skipping reserved ones and ones that still own processes", () => {
    const busy = new Set([1002]);
    const uids = createUidAllocator({ first: 1000, count: 5, reserved: [1001], inUse: (u) => busy.has(u), claimDir: claimDir() });
    const got = ["a", "b", "c"].map((s) => uids.allocate(s));
    expect(got.map((g) => g.uid)).toEqual([1000, 1003, 1004]);
    expect(got.map((g) => g.slot)).toEqual([0, 3, 4]);
    expect(got.every((g) => g.gid === g.uid)).toBe(true);
    expect(uids.allocate("a")).toEqual(got[0]);
  });

  it("refuses with a typed error when the range is used up, and hands a released uid out again", () => {
    const uids = createUidAllocator({ first: 2000, count: 2, reserved: [], inUse: () => false, claimDir: claimDir() });
    uids.allocate("a");
    uids.allocate("b");
    expect(() => uids.allocate("c")).toThrow(UidRangeError);
    uids.release("a");
    expect(uids.allocate("c").uid).toBe(2000);
    expect(uids.get("a")).toBeUndefined();
  });

  it("never hands one uid to two allocators on the host (overlapping ranges), and takes over a dead claimant's uid", () => {
    const dir = claimDir();
    const a = createUidAllocator({ first: 3000, count: 3, reserved: [], inUse: () => false, claimDir: dir });
    const b = createUidAllocator({ first: 3001, count: 3, reserved: [], inUse: () => false, claimDir: dir });
    expect(a.allocate("a1").uid).toBe(3000);
    expect(a.allocate("a2").uid).toBe(3001);
    // 3001 is a's: b starts past it.
    expect(b.allocate("b1").uid).toBe(3002);
    expect(() => a.allocate("a3")).toThrow(UidRangeError);
    expect(readFileSync(join(dir, "3000"), "utf8")).toBe(String(process.pid));
    // A released uid's claim goes, and the other allocator may take it.
    a.release("a2");
    expect(existsSync(join(dir, "3001"))).toBe(false);
    expect(b.allocate("b2").uid).toBe(3003);
    expect(b.allocate("b3").uid).toBe(3001);
    // A claim left by a process that died is stale: taken over.
    const dead = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout;
    writeFileSync(join(dir, "4000"), dead);
    const c = createUidAllocator({ first: 4000, count: 1, reserved: [], inUse: () => false, claimDir: dir });
    expect(c.allocate("c1").uid).toBe(4000);
    expect(readFileSync(join(dir, "4000"), "utf8")).toBe(String(process.pid));
    // A live process's claim (this one's too: another allocator's, or a held session's) is never swept; a dead one's (or none) is.
    expect(claimHeld(dir, 4000)).toBe(true);
    writeFileSync(join(dir, "5000"), "1");
    expect(claimHeld(dir, 5000)).toBe(true);
    writeFileSync(join(dir, "5001"), dead);
    expect(claimHeld(dir, 5001)).toBe(false);
    expect(claimHeld(dir, 5002)).toBe(false);
  });

  it("refuses a range that starts at root", () => {
    expect(() => createUidAllocator({ first: 0, count: 10, reserved: [], claimDir: claimDir() })).toThrow(UidRangeError);
  });

  it("sees which uids own processes on this host", () => {
    const own = process.getuid?.() ?? 0;
    expect(pidsOfUid(own)).toContain(process.pid);
    expect(uidHasProcesses(own)).toBe(true);
    expect(uidHasProcesses(3_999_999_000)).toBe(false);
  });
});
