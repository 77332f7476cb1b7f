/**
 * A runner that restarts kills what its previous process left running in its
 * sessions dir (a piped app survives a SIGKILLed runner), and nothing else.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@paddock/logging";
import { killLeftoverProcesses } from "./leftovers.ts";

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function spawnIn(cwd: string): { child: ChildProcess; exited: Promise<NodeJS.Signals | null> } {
  // Detached like a piped app: its own process group, with a child of its own.
  const child = spawn("sh", ["-c", "sleep 300 & wait"], { cwd, detached: true, stdio: "ignore" });
  children.push(child);
  return { child, exited: new Promise((resolve) => child.once("exit", (_code, sig) => resolve(sig))) };
}

describe("killLeftoverProcesses", () => {
  it("kills the process groups working in the sessions dir, and leaves others alone", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "paddock-leftovers-"));
    dirs.push(dataDir);
    const workspace = join(dataDir, "sessions", "ses_a", "workspace");
    const elsewhere = join(dataDir, "other");
    mkdirSync(workspace, { recursive: true });
    mkdirSync(elsewhere, { recursive: true });
    const leftover = spawnIn(workspace);
    const bystander = spawnIn(elsewhere);
    await new Promise((r) => setTimeout(r, 200));
    const killed = await killLeftoverProcesses(join(dataDir, "sessions"), silentLogger());
    expect(killed).toBeGreaterThanOrEqual(2); // the shell and its sleep
    expect(await leftover.exited).toBe("SIGKILL");
    expect(bystander.child.exitCode).toBeNull();
    expect(bystander.child.signalCode).toBeNull();
  });

  it("does nothing without a sessions dir", async () => {
    expect(await killLeftoverProcesses(join(tmpdir(), "paddock-no-such-dir"), silentLogger())).toBe(0);
  });
});
