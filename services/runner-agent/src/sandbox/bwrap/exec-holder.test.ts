/**
 * A session's exec namespace (exec-holder.ts) on real bwrap, with the real
 * paddock-init built from native/paddock-init.c: exec'd commands are forks
 * of one init and see each other, their exits, signals, output and stdin go
 * through its frames whole, the session cannot touch the init, a dead init
 * fails its commands and is replaced, and destroy leaves nothing.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@paddock/logging";
import type { Sandbox, SandboxBackend } from "../backend.ts";
import type { AppExit } from "../process-group.ts";
import { createBwrapBackend } from "./backend.ts";
import { DEFAULT_SANDBOX_LIMITS } from "./limits.ts";
import { probeBwrap } from "./probe.ts";
import { signalSession } from "./spawn.ts";
import { testHostIds, TEST_PATH } from "./test-sandbox.ts";
import { pidsOfUid } from "./uid-allocator.ts";

const INIT = fileURLToPath(new URL("../../../native/paddock-init", import.meta.url));
const ids = testHostIds(process.pid + 5_113);
const UID_COUNT = 16;
let dataDir: string;
let backend: SandboxBackend;
let counter = 0;

beforeAll(async () => {
  if (!existsSync(INIT)) throw new Error(`${INIT} is not built: npm test builds it (scripts/bootstrap.mjs), or cc -static -O2 -o it native/paddock-init.c`);
  dataDir = mkdtempSync(join(tmpdir(), "paddock-holder-"));
  const cap = await probeBwrap({ uid: ids.firstUid + UID_COUNT - 1, gid: ids.firstUid + UID_COUNT - 1, path: TEST_PATH });
  if (!cap.works || !cap.tools) throw new Error(`bwrap does not work here: ${cap.reason ?? ""}`);
  backend = createBwrapBackend({
    log: createLogger({ service: "runner-agent", destination: new Writable({ write: (_c, _e, done) => done() }) }),
    childPath: TEST_PATH,
    cap,
    tools: cap.tools,
    settings: { uidFirst: ids.firstUid, uidCount: UID_COUNT, netInstance: ids.instance, netPrefix: ids.prefix, limits: DEFAULT_SANDBOX_LIMITS, warmPool: 0, init: INIT },
  });
  await backend.prepare(join(dataDir, "sessions"));
});
afterAll(async () => {
  await backend?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

async function newSandbox(): Promise<Sandbox> {
  counter += 1;
  return backend.create({ sessionId: `ses_holder${counter}`, dir: join(dataDir, "sessions", `ses_holder${counter}`) });
}

interface Ran {
  exit: AppExit;
  stdout: Buffer;
  stderr: Buffer;
}

function run(sandbox: Sandbox, cmd: string[], stdin?: Buffer): Promise<Ran> {
  const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const proc = sandbox.startExec({ app: { name: "exec", cmd, tty: false }, env: { PATH: TEST_PATH }, onData: (b, s) => out[s ?? "stdout"].push(Buffer.from(b)) });
  if (stdin) proc.input.push(stdin);
  proc.endInput();
  return proc.exited.then((exit) => ({ exit, stdout: Buffer.concat(out.stdout), stderr: Buffer.concat(out.stderr) }));
}

describe("a session's exec namespace", () => {
  it("runs each command as a fork of one init, as the session's user: they see each other, the init as pid 1", async () => {
    const sandbox = await newSandbox();
    try {
      // Its first output means its shell runs (a fork of the init is started before its exec): ps then shows it as it is.
      let up: () => void = () => undefined;
      const running = new Promise<void>((resolve) => (up = resolve));
      const sleeper = sandbox.startExec({ app: { name: "exec", cmd: ["sh", "-c", "echo up; sleep 300"], tty: false }, env: { PATH: TEST_PATH }, onData: () => up() });
      await running;
      const ps = await run(sandbox, ["ps", "-eo", "pid,user,args"]);
      expect(ps.exit).toEqual({ exitCode: 0, signal: undefined });
      const lines = ps.stdout.toString().split("\n").map((l) => l.trim());
      expect(lines).toContainEqual(expect.stringMatching(/^1 +\S+ +\/run\/paddock-init$/));
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${sleeper.pid} +\\S+ +sh -c echo up; sleep 300$`)));
      const id = await run(sandbox, ["id", "-u"]);
      expect(id.stdout.toString().trim()).toBe(String(sandbox.user?.uid));
      sleeper.signal("SIGKILL");
      expect(await sleeper.exited).toEqual({ exitCode: null, signal: "SIGKILL" });
    } finally {
      await sandbox.destroy();
    }
  });

  it("keeps stdout and stderr apart, reports exit codes and signals, and reads a command's output whole after it exited", async () => {
    const sandbox = await newSandbox();
    try {
      const mixed = await run(sandbox, ["sh", "-c", "echo out; echo err >&2; exit 3"]);
      expect(mixed).toEqual({ exit: { exitCode: 3, signal: undefined }, stdout: Buffer.from("out\n"), stderr: Buffer.from("err\n") });
      expect((await run(sandbox, ["sh", "-c", "kill -TERM $$"])).exit).toEqual({ exitCode: null, signal: "SIGTERM" });
      const big = await run(sandbox, ["head", "-c", "3000000", "/dev/urandom"]);
      expect(big.stdout.byteLength).toBe(3_000_000);
      const missing = await run(sandbox, ["sh", "-c", "cd /nonexistent-dir && true"]);
      expect(missing.exit.exitCode).not.toBe(0);
    } finally {
      await sandbox.destroy();
    }
  });

  it("writes stdin through its window whole, bytes as they are, and closes it after the last", async () => {
    const sandbox = await newSandbox();
    try {
      const bytes = Buffer.alloc(3 * 1024 * 1024 + 7);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7919) & 0xff;
      const echoed = await run(sandbox, ["cat"], bytes);
      expect(echoed.stdout.equals(bytes)).toBe(true);
      expect((await run(sandbox, ["wc", "-c"], Buffer.alloc(0))).stdout.toString().trim()).toBe("0");
    } finally {
      await sandbox.destroy();
    }
  });

  it("signals the command's whole process group, its background jobs too", async () => {
    const sandbox = await newSandbox();
    try {
      const proc = sandbox.startExec({ app: { name: "exec", cmd: ["sh", "-c", "sleep 301 & sleep 302"], tty: false }, env: { PATH: TEST_PATH }, onData: () => undefined });
      // Both sleeps are up once ps lists them (asked until it does: each ask is one exec, no clock).
      for (let seen = ""; !(seen.includes("sleep 301") && seen.includes("sleep 302")); ) seen = (await run(sandbox, ["ps", "-eo", "args"])).stdout.toString();
      proc.signal("SIGKILL");
      expect(await proc.exited).toEqual({ exitCode: null, signal: "SIGKILL" });
      const left = await run(sandbox, ["sh", "-c", "ps -eo args | grep -c '^sleep 30[12]' || true"]);
      expect(left.stdout.toString().trim()).toBe("0");
    } finally {
      await sandbox.destroy();
    }
  });

  it("a signal sent at once after the start reaches the command's group (no window before the group exists)", async () => {
    const sandbox = await newSandbox();
    try {
      // Twenty in a row, each killed in the same breath as its start: the init forks, then reads the kill at once.
      for (let i = 0; i < 20; i++) {
        const proc = sandbox.startExec({ app: { name: "exec", cmd: ["sh", "-c", "trap '' TERM; sleep 3600 & while :; do sleep 1; done"], tty: false }, env: { PATH: TEST_PATH }, onData: () => undefined });
        proc.signal("SIGKILL");
        expect(await proc.exited).toEqual({ exitCode: null, signal: "SIGKILL" });
      }
      const left = await run(sandbox, ["sh", "-c", "ps -eo args | grep -c '^sleep 3600' || true"]);
      expect(left.stdout.toString().trim()).toBe("0");
    } finally {
      await sandbox.destroy();
    }
  });

  it("is out of the session's reach: pid 1 ignores its kill, its descriptors and memory are not the session's to open", async () => {
    const sandbox = await newSandbox();
    try {
      const probe = await run(sandbox, ["sh", "-c", "kill -9 1; kill -TERM 1; ls /proc/1/fd >/dev/null 2>&1 && echo fds-open; cat /proc/1/environ >/dev/null 2>&1 && echo environ-open; echo alive"]);
      expect(probe.stdout.toString()).toBe("alive\n");
      // The init is still the one serving: the next command runs.
      expect((await run(sandbox, ["echo", "next"])).stdout.toString()).toBe("next\n");
    } finally {
      await sandbox.destroy();
    }
  });

  it("fails its commands as killed when the init dies, and the next exec starts a new one", async () => {
    const sandbox = await newSandbox();
    try {
      const sleeper = sandbox.startExec({ app: { name: "exec", cmd: ["sleep", "300"], tty: false }, env: { PATH: TEST_PATH }, onData: () => undefined });
      await run(sandbox, ["true"]);
      signalSession(sandbox.user?.uid ?? 0, "SIGKILL");
      expect(await sleeper.exited).toEqual({ exitCode: null, signal: "SIGKILL" });
      expect((await run(sandbox, ["echo", "again"])).stdout.toString()).toBe("again\n");
    } finally {
      await sandbox.destroy();
    }
  });

  it("leaves nothing when the sandbox is destroyed: its commands end, no process of its uid is left", async () => {
    const sandbox = await newSandbox();
    const uid = sandbox.user?.uid ?? 0;
    const sleeper = sandbox.startExec({ app: { name: "exec", cmd: ["sh", "-c", "setsid sleep 303 & exec sleep 300"], tty: false }, env: { PATH: TEST_PATH }, onData: () => undefined });
    await run(sandbox, ["true"]);
    await sandbox.destroy();
    expect((await sleeper.exited).signal).toBe("SIGKILL");
    expect(pidsOfUid(uid, { live: true })).toEqual([]);
  });

  it("refuses to run anywhere but as pid 1 of a namespace (its exit would otherwise kill what it can reach)", () => {
    const r = spawnSync(INIT, [], { input: "", encoding: "utf8" });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("must run as pid 1");
  });
});
