import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostRlimits, networkCapability, probeBwrap, type BwrapCapability } from "./probe.ts";
import { runInSandbox, startTestSandboxes, testHostIds, TEST_PATH, type TestSandboxes, type TestSession } from "./test-sandbox.ts";
import { createUidAllocator } from "./uid-allocator.ts";

let cap: BwrapCapability;
let boxes: TestSandboxes;
let dataDir: string;
let s: TestSession;

beforeAll(async () => {
  const { firstUid } = testHostIds();
  cap = await probeBwrap({ uid: firstUid + 15, gid: firstUid + 15, path: TEST_PATH });
  dataDir = mkdtempSync("/var/lib/paddock-probe-test-");
  boxes = await startTestSandboxes(cap, createUidAllocator({ first: firstUid, count: 15, reserved: [0] }), dataDir);
  s = await boxes.session("pty");
});

afterAll(async () => {
  await boxes?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe("probeBwrap", () => {
  it("runs a sandbox with every namespace here, as an unprivileged uid, and finds its tools", () => {
    expect(cap.reason).toBeUndefined();
    expect(cap.works).toBe(true);
    expect(cap.version).toMatch(/^\d+\.\d+/);
    expect(cap.network.works).toBe(true);
  });

  it("says why when bwrap is missing", async () => {
    const none = await probeBwrap({ uid: 1, gid: 1, path: "/nonexistent" });
    expect(none.works).toBe(false);
    expect(none.reason).toContain("bwrap");
  });

  it("offers per-session networks by the capabilities the runner holds, not by its uid", () => {
    const status = (capEff: string) => `Name:\tnode\nUid:\t46001\t46001\t46001\t46001\nCapEff:\t${capEff}\n`;
    // A runner of its own user with decision 0043's set (setuid, setgid, sys_admin, net_admin, chown, fowner, dac_override, kill).
    expect(networkCapability("/sbin/ip", "/sbin/nft", status("00000000002010eb"))).toMatchObject({ works: true, reason: undefined });
    expect(networkCapability("/sbin/ip", "/sbin/nft", status("00000000000010eb"))).toMatchObject({ works: false, reason: "missing: CAP_SYS_ADMIN" });
    expect(networkCapability("/sbin/ip", undefined, status("0000000000000000"))).toMatchObject({ works: false, reason: "missing: nft (nftables), CAP_SYS_ADMIN, CAP_NET_ADMIN" });
  });

  it("reads the runner's hard rlimits, unlimited as Infinity", () => {
    const text = [
      "Limit                     Soft Limit           Hard Limit           Units",
      "Max file size             unlimited            unlimited            bytes",
      "Max processes             4096                 8192                 processes",
      "Max open files            1024                 524288               files",
    ].join("\n");
    expect(hostRlimits(text)).toEqual({ processes: 8192, openFiles: 524_288, fileSizeBytes: Infinity });
    expect(hostRlimits().openFiles).toBeGreaterThan(0);
  });
});

describe("limits", () => {
  it("applies the spec's rlimits inside the sandbox", async () => {
    const r = await runInSandbox(s.spec(["sh", "-c", "ulimit -p; ulimit -n; ulimit -f"], { rlimits: { processes: 33, openFiles: 77, fileSizeBytes: 1024 * 512 } }), cap).done;
    // dash: -p processes, -n open files, -f file size in 512-byte blocks.
    expect(r.out.trim().split("\n")).toEqual(["33", "77", "1024"]);
  });

  it("stops a write past the file size limit", async () => {
    const r = await runInSandbox(s.spec(["sh", "-c", "head -c 2000000 /dev/zero > big; echo status=$?; wc -c < big"], { rlimits: { processes: 33, openFiles: 77, fileSizeBytes: 1024 * 1024 } }), cap).done;
    expect(r.out).toMatch(/status=[1-9]/);
    expect(Number(readFileSync(join(s.workspace, "big")).length)).toBe(1024 * 1024);
  });
});

describe("spawnInSandbox on a PTY", () => {
  it("keeps the PTY as the sandboxed shell's controlling terminal (job control), and starts a new session without one", async () => {
    // Field 8 of /proc/self/stat is the controlling terminal's foreground process group: -1 without one,
    // 0 when that group is outside the sandbox's pid namespace (here: the PTY's first process, bwrap's outer one).
    const script = "read -r _ _ _ _ _ _ _ tpgid _ < /proc/self/stat; echo tpgid=$tpgid; [ -t 0 ] && echo stdin-is-tty";
    const onPty = await runInSandbox(s.spec(["bash", "-c", script], { tty: true }), cap).done;
    expect(onPty.out).toMatch(/tpgid=\d+/);
    expect(onPty.out).toContain("stdin-is-tty");
    const piped = await runInSandbox(s.spec(["bash", "-c", script], { tty: false }), cap).done;
    expect(piped.out).toContain("tpgid=-1");
  });

  it("runs an interactive shell with job control: a stopped job is reported by the shell", async () => {
    let seen!: () => void;
    const stopped = new Promise<void>((resolve) => (seen = resolve));
    const run = runInSandbox(s.spec(["bash", "--norc", "--noprofile", "-i"], { tty: true }), cap, (out) => {
      if (/Stopped\s+sh -c/.test(out)) seen();
    });
    // A foreground job that stops itself: only a shell with job control takes the terminal back and reports it.
    run.proc.write("sh -c 'kill -TSTP $$'\n");
    await Promise.race([stopped, run.done.then((r) => Promise.reject(new Error(`the shell exited: ${r.out}`)))]);
    expect(run.proc.signal("SIGKILL")).toBeGreaterThan(0);
    await run.done;
  });
});
