/**
 * The CLI against the real stack: nats-server plus all four services as OS
 * processes (startStack). `run` is exercised as a real child process through
 * bin/paddock.mjs; the rest run in-process through main().
 * A missing service entry point fails the suite (it never skips): a suite that
 * cannot find its services proves nothing.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, serviceEntry, startStack, type Stack } from "@paddock/testing";
import { runCli, startCli } from "./testing/run-cli.ts";

const missingServices = Object.values(serviceEntry).filter((f) => !existsSync(join(repoRoot, f)));
const bin = join(repoRoot, "cli", "bin", "paddock.mjs");

interface ChildResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs bin/paddock.mjs as its own process, optionally feeding stdin (then leaving it open). */
function paddock(args: readonly string[], env: Record<string, string>, stdin?: string): Promise<ChildResult> {
  const child = spawn(process.execPath, [bin, ...args], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  if (stdin !== undefined) child.stdin.write(stdin);
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Resolves once the session's `start` fact is in the audit stream (so its
 * record is running): terminal output can be seen before that fact commits.
 */
async function untilStarted(env: Record<string, string>, id: string): Promise<void> {
  const abort = new AbortController();
  const res = await fetch(`${env.PADDOCK_URL ?? ""}/v1/events?sessionId=${id}&follow=true`, {
    headers: { authorization: `Bearer ${env.PADDOCK_TOKEN ?? ""}` },
    signal: abort.signal,
  });
  if (!res.body) throw new Error("events: no body");
  let text = "";
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      if (text.split("\n").some((l) => l.includes('"action":"start"'))) return;
    }
    throw new Error(`events ended before the start of ${id}`);
  } finally {
    abort.abort();
  }
}

interface SessionJson {
  id: string;
  name?: string;
  state: string;
  spec: { cmd?: string[] };
  childExitCode: number | null;
}

describe("paddock CLI end to end", () => {
  let stack: Stack;
  let env: Record<string, string>;

  beforeAll(async () => {
    if (missingServices.length) throw new Error(`the CLI end-to-end suite needs every service; missing entry points: ${missingServices.join(", ")}`);
    stack = await startStack();
    env = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const sessionNamed = async (name: string): Promise<SessionJson> => {
    const ls = await runCli(["ls", "--all", "--json"], env);
    expect(ls.code, ls.stderr).toBe(0);
    const found = (JSON.parse(ls.stdout) as SessionJson[]).find((s) => s.name === name);
    if (!found) throw new Error(`no session named ${name} in ${ls.stdout}`);
    return found;
  };

  it("run prints the output and exits with the command's code; ls, get, logs see it", async () => {
    const r = await paddock(["run", "--name", "hi3", "--", "sh", "-c", "printf hi; exit 3"], env);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("hi");
    expect(r.code).toBe(3);

    const s = await sessionNamed("hi3");
    expect(s.spec.cmd).toEqual(["sh", "-c", "printf hi; exit 3"]);

    const get = await runCli(["get", s.id, "--json"], env);
    expect(get.code, get.stderr).toBe(0);
    expect((JSON.parse(get.stdout) as SessionJson).id).toBe(s.id);
    const human = await runCli(["get", s.id], env);
    expect(human.stdout).toMatch(new RegExp(`^id: +${s.id}$`, "m"));

    expect(await runCli(["logs", s.id], env)).toEqual({ code: 0, stdout: "hi", stderr: "" });
    // Following an ended app replays its whole log and stops at the exit frame.
    expect(await runCli(["logs", "-f", s.id], env)).toEqual({ code: 0, stdout: "hi", stderr: "" });
    // Attaching to it as a viewer from the start gives the same bytes and the exit code.
    expect(await runCli(["attach", s.id, "--view", "--since", "all"], env)).toEqual({ code: 3, stdout: "hi", stderr: "" });

    const events = await runCli(["events", "--session", s.id, "--json"], env);
    expect(events.code, events.stderr).toBe(0);
    const actions = (JSON.parse(events.stdout) as Array<{ action: string; resource: { id: string } }>).map((e) => e.action);
    expect(actions).toContain("create");
  });

  it("run forwards stdin that is not a terminal", async () => {
    const r = await paddock(["run", "--", "sh", "-c", 'read x; printf "got:%s" "$x"'], env, "abc\n");
    expect(r.stdout, r.stderr).toContain("got:abc");
    expect(r.code, r.stderr).toBe(0);
  });

  it("rm destroys a running session and prints its id", async () => {
    const created = await runCli(["run", "-d", "--name", "sleeper", "--", "sleep", "1000"], env);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    const listed = await runCli(["ls"], env);
    expect(listed.stdout).toMatch(new RegExp(`^${id}\\s+sleeper\\s`, "m"));
    expect(await runCli(["rm", id], env)).toEqual({ code: 0, stdout: `${id}\n`, stderr: "" });
    const after = JSON.parse((await runCli(["get", id, "--json"], env)).stdout) as SessionJson;
    expect(["canceled", "destroyed"]).toContain(after.state);
  });

  it("a second controller supersedes the first, which exits 1", async () => {
    const created = await runCli(["run", "-d", "--", "sh", "-c", "printf ready; sleep 1000"], env);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    const first = startCli(["attach", id, "--since", "all"], env);
    await first.stdout.waitFor("ready");
    const second = startCli(["attach", id, "--since", "all"], env);
    expect(await first.code).toBe(1);
    expect(first.stderr.text()).toMatch(/another controller attached/);
    await second.stdout.waitFor("ready");
    expect((await runCli(["rm", id], env)).code).toBe(0);
    await second.code; // the app is killed: the attach ends either way
  });

  it("env, create, suspend, resume, snapshot, recycle work against the real services", async () => {
    const env1 = await runCli(["env", "create", "--name", "cli-env", "--setup", "echo made > made.txt", "--egress", "example.com", "--json"], env);
    expect(env1.code, env1.stderr).toBe(0);
    const envId = (JSON.parse(env1.stdout) as { id: string }).id;
    expect((await runCli(["env", "ls"], env)).stdout).toContain("cli-env");
    const updated = await runCli(["env", "update", envId, "--clear-egress", "--json"], env);
    expect(updated.code, updated.stderr).toBe(0);
    expect((JSON.parse(updated.stdout) as { egressAllow: string[] }).egressAllow).toEqual([]);

    const created = await runCli(["create", "--env", envId, "--name", "life", "--", "sh", "-c", "cat made.txt; exec sleep 600"], env);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    const logs = startCli(["logs", "-f", id], env);
    await logs.stdout.waitFor("made");
    await untilStarted(env, id);

    const warm = await runCli(["suspend", "--warm", id, "--json"], env);
    expect(warm.code, warm.stderr).toBe(0);
    expect((JSON.parse(warm.stdout) as SessionJson).state).toBe("suspended_warm");
    const resumed = await runCli(["resume", id, "--json"], env);
    expect((JSON.parse(resumed.stdout) as SessionJson).state).toBe("running");
    const snap = await runCli(["snapshot", id], env);
    expect(snap.code, snap.stderr).toBe(0);
    expect(snap.stdout).toMatch(/^checkpoints(-runner-[^/]+)?\//);
    const cold = await runCli(["suspend", id, "--json"], env);
    expect((JSON.parse(cold.stdout) as SessionJson).state).toBe("suspended_cold");
    expect((JSON.parse((await runCli(["resume", id, "--json"], env)).stdout) as SessionJson).state).toBe("running");

    const recycled = await runCli(["recycle", id], env);
    expect(recycled.code, recycled.stderr).toBe(0);
    const fresh = recycled.stdout.trim();
    expect(fresh).not.toBe(id);
    expect((await runCli(["rm", fresh], env)).code).toBe(0);
    await logs.code;
    expect((await runCli(["env", "rm", envId], env)).code).toBe(0);
  });

  it("runners lists the stack's runner", async () => {
    const r = await runCli(["runners", "--json"], env);
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as Array<{ id: string }>).map((x) => x.id)).toContain("runner-1");
  });

  it("a wrong token is unauthenticated, exit 1", async () => {
    const r = await paddock(["ls"], { ...env, PADDOCK_TOKEN: "pdk_wrong" });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: unauthenticated: /);
  });

  it("an unknown session is not_found, exit 1", async () => {
    const r = await runCli(["get", "no-such-session"], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: not_found: /);
  });
});
