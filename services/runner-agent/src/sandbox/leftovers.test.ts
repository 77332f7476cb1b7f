/**
 * A runner that restarts kills what its previous process left running in its
 * sessions dir (a piped app survives a SIGKILLed runner), and nothing else.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@paddock/logging";
import { scratchDirs } from "@paddock/testing";
import { killLeftoverProcesses } from "./leftovers.ts";
import { stillRuns } from "../testing/test-support.ts";

const dirs = scratchDirs("paddock-leftovers-");
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  dirs.removeAll();
});

/** Detached like a piped app: its own process group, with a child of its own; resolves once both exist. */
async function spawnIn(cwd: string): Promise<{ child: ChildProcess; grandchild: number; exited: Promise<NodeJS.Signals | null> }> {
  const child = spawn("sh", ["-c", "sleep 300 & echo $!; wait"], { cwd, detached: true, stdio: ["ignore", "pipe", "ignore"] });
  children.push(child);
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_code, sig) => resolve(sig)));
  const [line] = await once(createInterface({ input: child.stdout! }), "line");
  return { child, grandchild: Number(line), exited };
}

type Spawned = Awaited<ReturnType<typeof spawnIn>>;

/** The group's SIGKILL reached its every member. */
async function expectKilled(p: Spawned): Promise<void> {
  expect(await p.exited).toBe("SIGKILL");
  expect(stillRuns(p.grandchild)).toBe(false);
}

/** Untouched, still running; then ended by the test. */
function expectSpared(p: Spawned): void {
  expect(p.child.exitCode).toBeNull();
  expect(p.child.signalCode).toBeNull();
  expect(stillRuns(p.grandchild)).toBe(true);
  process.kill(-p.child.pid!, "SIGKILL");
}

describe("killLeftoverProcesses", () => {
  it("kills the process groups working in the sessions dir, and leaves others alone", async () => {
    const dataDir = dirs.make();
    const workspace = join(dataDir, "sessions", "ses_a", "workspace");
    const elsewhere = join(dataDir, "other");
    mkdirSync(workspace, { recursive: true });
    mkdirSync(elsewhere, { recursive: true });
    const leftover = await spawnIn(workspace);
    const bystander = await spawnIn(elsewhere);
    const killed = await killLeftoverProcesses(join(dataDir, "sessions"), silentLogger());
    expect(killed).toBe(1); // one process group: the shell and its sleep
    await expectKilled(leftover);
    expectSpared(bystander);
  });

  it("spares the sessions it is told are held, and kills the rest (the periodic stray sweep)", async () => {
    const dataDir = dirs.make();
    const sessions = join(dataDir, "sessions");
    for (const id of ["ses_held", "ses_gone"]) mkdirSync(join(sessions, id, "workspace"), { recursive: true });
    const held = await spawnIn(join(sessions, "ses_held", "workspace"));
    const stray = await spawnIn(join(sessions, "ses_gone", "workspace"));
    expect(await killLeftoverProcesses(sessions, silentLogger(), "test", (name) => name === "ses_held")).toBe(1);
    await expectKilled(stray);
    expectSpared(held);
  });

  it("does nothing without a sessions dir", async () => {
    expect(await killLeftoverProcesses(join(tmpdir(), "paddock-no-such-dir"), silentLogger())).toBe(0);
  });
});
