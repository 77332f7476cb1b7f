/**
 * The warm pool through the bwrap backend, on real bwrap, namespaces and
 * networks: a claimed sandbox runs its app exactly as a cold start would
 * (environment, identity, capabilities, signals, fds, limits, terminal), a
 * dead waiter is never handed an app, hostile values execute nothing, and a
 * runner's stop leaves nothing behind.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@paddock/logging";
import type { Sandbox, SandboxBackend } from "../backend.ts";
import { createBwrapBackend, type BwrapEvent } from "./backend.ts";
import { DEFAULT_SANDBOX_LIMITS } from "./limits.ts";
import { probeBwrap } from "./probe.ts";
import { signalSession } from "./spawn.ts";
import { testHostIds, TEST_PATH } from "./test-sandbox.ts";
import { DEFAULT_UID_CLAIM_DIR, pidsOfUid } from "./uid-allocator.ts";
import { coldStartEnv } from "./warm-script.ts";

// Not the ids other test files take in the same worker process: another uid range, instance and /16.
const ids = testHostIds(process.pid + 3_707);
const UID_COUNT = 16;
const uids = Array.from({ length: UID_COUNT }, (_, i) => ids.firstUid + i);
const SIZE = { cols: 91, rows: 37 };
let dataDir: string;
let sessionsDir: string;
let backend: SandboxBackend;
let stopped = false;
const events: BwrapEvent[] = [];
/** uids of the entries ready now (taken ones leave at their claim or decline). */
const readyUids = new Set<number>();
let notify: () => void = () => undefined;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "paddock-warm-"));
  sessionsDir = join(dataDir, "sessions");
  const cap = await probeBwrap({ uid: ids.firstUid + UID_COUNT - 1, gid: ids.firstUid + UID_COUNT - 1, path: TEST_PATH });
  if (!cap.works || !cap.tools) throw new Error(`bwrap does not work here: ${cap.reason ?? ""}`);
  backend = createBwrapBackend({
    log: createLogger({ service: "runner-agent", destination: new Writable({ write: (_c, _e, done) => done() }) }),
    childPath: TEST_PATH,
    cap,
    tools: cap.tools,
    settings: { uidFirst: ids.firstUid, uidCount: UID_COUNT, netInstance: ids.instance, netPrefix: ids.prefix, limits: DEFAULT_SANDBOX_LIMITS, warmPool: 2 },
    onEvent: (e) => {
      events.push(e);
      if (e.type === "ready") readyUids.add(e.uid);
      else if (e.type === "discarded" || e.type === "claimed" || e.type === "declined") readyUids.delete(e.uid);
      notify();
    },
  });
  await backend.prepare(sessionsDir);
});
afterAll(async () => {
  if (!stopped) await backend?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** Resolves once pred holds, checked at every event of the backend. */
function untilEvent(pred: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const prev = notify;
    const check = () => {
      prev();
      if (!pred()) return;
      notify = prev;
      resolve();
    };
    notify = check;
    check();
  });
}

const untilReady = (n: number) => untilEvent(() => readyUids.size >= n);
let counter = 0;

async function createSession(): Promise<{ id: string; sandbox: Sandbox }> {
  const id = `w${++counter}`;
  return { id, sandbox: await backend.create({ sessionId: id, dir: join(sessionsDir, id) }) };
}

/** Runs app in sandbox on a PTY of SIZE; answers what it printed and how it ended. */
async function run(sandbox: Sandbox, cmd: string[], env: Record<string, string>, tty = true): Promise<{ out: string; exitCode: number | null }> {
  let out = "";
  const app = sandbox.startApp({ app: { name: "main", cmd, tty }, env, size: SIZE, onData: (bytes) => (out += Buffer.from(bytes).toString()) });
  const exit = await app.exited;
  return { out, exitCode: exit.exitCode };
}

const starts = () => events.flatMap((e) => (e.type === "app_start" ? [e.start] : []));
const BASE_ENV = { PATH: TEST_PATH, HOME: "/home/workspace", LANG: "C.UTF-8", TERM: "xterm-256color" };
const HOSTILE: Record<string, string> = {
  ...BASE_ENV,
  QUOTES: `it's "quoted" '\\'' and \\`,
  NEWLINES: "line one\nline two\n\nexport INJECTED=1\n",
  SUBST: "$(touch /home/workspace/pwned-subst) `touch /home/workspace/pwned-tick` ${HOME}",
  SEMI: "x'; touch /home/workspace/pwned-semi; echo '",
  EMPTY: "",
  UNICODE: "naïve ☃ \u0001\u007f",
  _under_1: "ok",
};

/** NUL-separated NAME=value pairs (a process's environ) as a map. */
function environOf(bytes: Buffer): Map<string, string> {
  const entries = bytes.toString().split("\0").filter((e) => e !== "");
  return new Map(entries.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]));
}

describe("a warm bwrap sandbox", () => {
  it("runs its first app with exactly the app's environment (nothing of the pool's), byte-exact however hostile, executing none of it", async () => {
    await untilReady(2);
    expect(events).toContainEqual({ type: "ready_count", ready: 2 });
    const before = new Set(readyUids);
    const { sandbox } = await createSession();
    expect(before.has(sandbox.user?.uid ?? -1)).toBe(true);
    // The take is told at once (the runner's gauge of ready sandboxes).
    expect(events.filter((e) => e.type === "ready_count").at(-1)).toEqual({ type: "ready_count", ready: 1 });
    const { out, exitCode } = await run(sandbox, ["cp", "/proc/self/environ", "environ"], HOSTILE);
    expect(exitCode).toBe(0);
    expect(starts().at(-1)).toBe("warm");
    // cp printed nothing, and nothing from before the claim reached the terminal.
    expect(out).toBe("");
    const environ = environOf(readFileSync(join(sandbox.workspace, "environ")));
    expect(Object.fromEntries(environ)).toEqual(coldStartEnv(HOSTILE, "/home/workspace"));
    for (const f of ["pwned-subst", "pwned-tick", "pwned-semi"]) expect(existsSync(join(sandbox.workspace, f))).toBe(false);
    await sandbox.destroy();
  });

  it("runs it as the sandbox's uid in the workspace on a PTY of the app's size; hostile arguments arrive as they are", async () => {
    await untilReady(1);
    const { sandbox } = await createSession();
    const script = 'test -t 0 && test -t 1 && echo "uid=$(id -u) cwd=$(pwd) size=$(stty size)."; printf "%s|" "$@"';
    const { out, exitCode } = await run(sandbox, ["sh", "-c", script, "sh", "a'b", "$(touch pwned)", "x\ny", "`id`"], BASE_ENV);
    expect(exitCode).toBe(0);
    expect(starts().at(-1)).toBe("warm");
    // The terminal shows the app's output only, from its first byte.
    expect(out).toMatch(new RegExp(`^uid=${sandbox.user?.uid} cwd=/home/workspace size=37 91\\.\r\n`));
    expect(out.slice(out.indexOf("\n") + 1)).toBe("a'b|$(touch pwned)|x\r\ny|`id`|");
    expect(existsSync(join(sandbox.workspace, "pwned"))).toBe(false);
    await sandbox.destroy();
  });

  it("starts the app as a cold start would: the same identity, capabilities, signals, fds, limits, terminal and network", async () => {
    await untilReady(1);
    const { sandbox } = await createSession();
    const probe = [
      'grep -E "^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|SigBlk|SigIgn|SigCgt):" /proc/self/status',
      "cat /proc/self/limits",
      // The shell's own descriptors, listed while it holds no pipe of its own.
      "ls -l /proc/$$/fd > fds; awk 'NR>1 {print $9, $11}' fds | sed 's|/dev/pts/[0-9]*|PTS|'",
      "stty -a | sed 's|line = [0-9]*||'",
      "readlink /proc/self/ns/net",
      "tr '\\0' '\\n' < /proc/$$/environ | sort",
      "echo MOUNTS; awk '{print $5}' /proc/self/mountinfo",
    ].join("; ");
    // The sandbox's first app claims its waiter; a second one is started cold, in the same sandbox.
    const warm = await run(sandbox, ["sh", "-c", probe], BASE_ENV);
    const cold = await run(sandbox, ["sh", "-c", probe], BASE_ENV);
    expect(starts().slice(-2)).toEqual(["warm", "cold"]);
    expect([warm.exitCode, cold.exitCode]).toEqual([0, 0]);
    const [warmState, warmMounts] = warm.out.split("MOUNTS");
    const [coldState, coldMounts] = cold.out.split("MOUNTS");
    expect(warmState).toContain("CapEff:\t0000000000000000");
    expect(warmState).toBe(coldState);
    // One mount more: the runner's control directory the waiter read its script from, read-only.
    // Less the host's network namespaces (mounts of the host root's /run/netns, hidden below the sandbox's /run): they come and go with other sessions.
    const mounts = (s: string | undefined) => (s ?? "").split("\r\n").filter((m) => m !== "" && !m.startsWith("/run/netns/"));
    expect(mounts(warmMounts)).toEqual([...mounts(coldMounts).slice(0, mounts(coldMounts).indexOf("/home/workspace") + 1), "/run/paddock", ...mounts(coldMounts).slice(mounts(coldMounts).indexOf("/home/workspace") + 1)]);
    await sandbox.destroy();
  });

  it("holds no descriptor of another session's terminal (the runner's PTY masters), warm or cold", async () => {
    await untilReady(1);
    const other = await createSession();
    let otherOut = "";
    const otherApp = other.sandbox.startApp({ app: { name: "main", cmd: ["sh", "-c", "echo OTHER-READY; exec cat"] }, env: BASE_ENV, size: SIZE, onData: (b) => (otherOut += Buffer.from(b).toString()) });
    await untilEvent(() => otherOut.includes("OTHER-READY"));
    await untilReady(1);
    const { sandbox } = await createSession();
    // What each app holds open besides its terminal (listed by ls while the shell holds no pipe of its own), and a write to each such descriptor (another terminal would take it as input).
    const probe = 'ls -l /proc/$$/fd > fds; for n in $(awk \'NR>1 && $9>2 {print $9}\' fds); do echo "fd $n $(readlink /proc/$$/fd/$n)"; echo typed-by-intruder >&"$n"; done; echo PROBED';
    const warm = await run(sandbox, ["bash", "-c", probe], BASE_ENV);
    const cold = await run(sandbox, ["bash", "-c", probe], BASE_ENV);
    expect(starts().slice(-2)).toEqual(["warm", "cold"]);
    expect([warm.out, cold.out]).toEqual(["PROBED\r\n", "PROBED\r\n"]);
    otherApp.input.push(Buffer.from("\x04"));
    await otherApp.exited;
    expect(otherOut).not.toContain("typed-by-intruder");
    await Promise.all([sandbox.destroy(), other.sandbox.destroy()]);
  });

  it("takes a script larger than the FIFO holds at once (a large environment)", async () => {
    await untilReady(1);
    const { sandbox } = await createSession();
    const big = { ...BASE_ENV, BIG: "x'y".repeat(40_000), BIG2: "z".repeat(100_000) };
    const { exitCode } = await run(sandbox, ["cp", "/proc/self/environ", "environ"], big);
    expect(exitCode).toBe(0);
    expect(starts().at(-1)).toBe("warm");
    expect(Object.fromEntries(environOf(readFileSync(join(sandbox.workspace, "environ"))))).toEqual(coldStartEnv(big, "/home/workspace"));
    await sandbox.destroy();
  });

  it("starts cold where a shell could not pass the app's environment as it is, with that environment", async () => {
    await untilReady(1);
    const { sandbox } = await createSession();
    const odd = { ...BASE_ENV, "dotted.name": "a", OPTIND: "not-a-number" };
    const { exitCode } = await run(sandbox, ["cp", "/proc/self/environ", "environ"], odd);
    expect(exitCode).toBe(0);
    const declined = events.findIndex((e) => e.type === "declined" && e.uid === sandbox.user?.uid);
    expect(events[declined]).toEqual({ type: "declined", uid: sandbox.user?.uid, reason: "environment name a shell cannot export" });
    expect(events.slice(declined + 1).find((e) => e.type === "app_start")).toEqual({ type: "app_start", start: "cold", reason: "declined by its waiter" });
    expect(Object.fromEntries(environOf(readFileSync(join(sandbox.workspace, "environ"))))).toEqual(coldStartEnv(odd, "/home/workspace"));
    await sandbox.destroy();
  });

  it("starts a piped first app cold and ends the waiter it did not use", async () => {
    await untilReady(1);
    const { sandbox } = await createSession();
    const { out, exitCode } = await run(sandbox, ["sh", "-c", "id -u; ls /run/paddock 2>&1 || true"], BASE_ENV, false);
    expect(exitCode).toBe(0);
    expect(out).toContain(`${sandbox.user?.uid}\n`);
    expect(out).toContain("No such file or directory");
    const declined = events.findIndex((e) => e.type === "declined" && e.uid === sandbox.user?.uid);
    expect(events[declined]).toEqual({ type: "declined", uid: sandbox.user?.uid, reason: "piped app" });
    expect(events.slice(declined + 1).find((e) => e.type === "app_start")).toEqual({ type: "app_start", start: "cold", reason: "piped app" });
    await sandbox.destroy();
  });

  it("keeps its entry for the next create when a session's directory is there already (that create starts cold)", async () => {
    await untilReady(2);
    const before = [...readyUids];
    const id = `w${++counter}`;
    mkdirSync(join(sessionsDir, id, "left-over"), { recursive: true });
    const sandbox = await backend.create({ sessionId: id, dir: join(sessionsDir, id) });
    expect(before).not.toContain(sandbox.user?.uid);
    const { exitCode } = await run(sandbox, ["true"], BASE_ENV);
    expect([exitCode, starts().at(-1)]).toEqual([0, "cold"]);
    expect([...readyUids]).toEqual(before);
    await sandbox.destroy();
  });

  it("never hands out an entry whose waiter died: noticed by its exit, or by its FIFO having no reader", async () => {
    await untilReady(2);
    const [first] = [...readyUids];
    if (first === undefined) throw new Error("a ready entry expected");
    // Noticed by its exit: discarded, and another one is started in its place.
    signalSession(first, "SIGKILL");
    await untilEvent(() => events.some((e) => e.type === "discarded" && e.uid === first && e.reason === "ended"));
    await untilReady(2);
    // In the pool's order: the next take tries head first.
    const [head, tail] = [...readyUids];
    if (head === undefined || tail === undefined) throw new Error("two ready entries expected");
    // Dead before the pool could see its exit: killed and gone from /proc without a turn of the event loop, then taken.
    signalSession(head, "SIGKILL");
    for (let i = 0; pidsOfUid(head, { live: true }).length > 0; i++) if (i > 1_000_000) throw new Error("killed waiter did not go");
    const { sandbox } = await createSession();
    expect(events).toContainEqual({ type: "discarded", uid: head, reason: "no reader on its FIFO" });
    expect(sandbox.user?.uid, JSON.stringify({ head, tail, events: events.slice(-12) })).toBe(tail);
    const { out, exitCode } = await run(sandbox, ["sh", "-c", "echo ran-as-$(id -u)."], BASE_ENV);
    expect([out, exitCode]).toEqual([`ran-as-${tail}.\r\n`, 0]);
    expect(starts().at(-1)).toBe("warm");
    await sandbox.destroy();
  });

  it("leaves nothing when the runner stops: no process of the range, no network, no directory, no uid claim", async () => {
    await untilReady(2);
    const { sandbox } = await createSession();
    stopped = true;
    await backend.stop();
    expect(events.filter((e) => e.type === "ready_count").at(-1)).toEqual({ type: "ready_count", ready: 0 });
    expect(uids.filter((u) => pidsOfUid(u, { live: true }).length > 0)).toEqual([]);
    expect(execFileSync("ip", ["netns", "list"]).toString()).not.toContain(`paddock-${ids.instance}-`);
    expect(readdirSync(sessionsDir).filter((n) => n.startsWith(".warm-") || n.startsWith(".discarded-.warm-"))).toEqual([]);
    expect(existsSync(sandbox.workspace)).toBe(false);
    expect(uids.filter((u) => existsSync(join(DEFAULT_UID_CLAIM_DIR, String(u))))).toEqual([]);
  });
});
