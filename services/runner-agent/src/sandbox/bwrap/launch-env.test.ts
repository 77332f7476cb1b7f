/**
 * A session's environment reaches its command and nothing outside its
 * sandbox (launch.ts, launch-env.ts), on real bwrap: a variable it names
 * (LD_PRELOAD) steers no link of the chain, the chain's processes hold none of
 * it, and it is in no argv and no file anyone else could open.
 */
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SandboxSpec } from "./launch.ts";
import { probeBwrap, type BwrapCapability } from "./probe.ts";
import { runInSandbox, singleSession, singleSessionSpec, testHostIds, TEST_PATH } from "./test-sandbox.ts";
import { pidsOfUid, type SessionIds } from "./uid-allocator.ts";

// Not the ids other test files take in the same worker process.
const ids = testHostIds(process.pid + 4_127);
let cap: BwrapCapability;
let dataDir: string;
let session: SessionIds;

beforeAll(async () => {
  cap = await probeBwrap({ uid: ids.firstUid + 15, gid: ids.firstUid + 15, path: TEST_PATH });
  if (!cap.works) throw new Error(`bwrap does not work here: ${cap.reason ?? ""}`);
  ({ dataDir, session } = singleSession("paddock-launch-env-", ids.firstUid, "env"));
});
afterAll(() => {
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

function spec(command: string[], env: Record<string, string>): SandboxSpec {
  return singleSessionSpec(dataDir, session, command, { hide: [dataDir], env });
}

describe("a session's environment", () => {
  it("steers no link of the launch chain: a preload the session names is tried by its own command only", async () => {
    // Each process that honours LD_PRELOAD and cannot load it says so once on stderr: on the old chain, the root prlimit and setpriv and bwrap did too.
    const r = await runInSandbox(spec(["/bin/true"], { PATH: TEST_PATH, LD_PRELOAD: "/nonexistent/paddock-preload.so" }), cap).done;
    expect(r.exitCode).toBe(0);
    expect(r.out.split("\n").filter((l) => l.includes("paddock-preload.so"))).toHaveLength(1);
  });

  it("is held by the sandboxed command alone: not by the chain's processes, in no argv, in no file left behind", async () => {
    const secret = `s3cret-${process.pid}`;
    const shmBefore = readdirSync("/dev/shm").filter((n) => n.startsWith("paddock-env-"));
    let ready!: () => void;
    const up = new Promise<void>((resolve) => (ready = resolve));
    // The command that says "up" is the one that stays (reading its terminal): an `exec` after it could be read mid-exec, when its environment is still empty.
    const run = runInSandbox(spec(["/bin/sh", "-c", "echo up; read line"], { PATH: TEST_PATH, SESSION_SECRET: secret }), cap, (out) => out.includes("up") && ready());
    await up;
    const environOf = (pid: number) => readFileSync(`/proc/${pid}/environ`).toString();
    const ppidOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[1]);
    // bwrap's outer process (the chain's first, on the host for the session's life), the pid namespace's init (its child), and the command.
    const outer = run.proc.pid;
    const pids = pidsOfUid(session.uid, { live: true });
    const init = pids.find((pid) => ppidOf(pid) === outer);
    const apps = pids.filter((pid) => pid !== outer && pid !== init);
    expect(init).toBeDefined();
    expect(apps).toHaveLength(1);
    expect(environOf(apps[0] ?? 0).split("\0")).toContain(`SESSION_SECRET=${secret}`);
    for (const pid of [outer, init ?? 0]) {
      expect(readFileSync(`/proc/${pid}/cmdline`).toString()).not.toContain(secret);
      // What its head (bash) added to the empty environment the chain was spawned with, and nothing else.
      for (const e of environOf(pid).split("\0").filter(Boolean)) expect(["PWD", "SHLVL"]).toContain(e.slice(0, e.indexOf("=")));
    }
    expect(readdirSync("/dev/shm").filter((n) => n.startsWith("paddock-env-"))).toEqual(shmBefore);
    run.proc.signal("SIGKILL");
    await run.done;
  });
});
