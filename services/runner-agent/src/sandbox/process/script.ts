import { spawn } from "node:child_process";
import type { CommandResult, SandboxCommand, ScriptOutcome } from "../backend.ts";
import { resolveExecutable } from "../executable.ts";
import { OutputTail } from "../output-tail.ts";

export type { ScriptOutcome } from "../backend.ts";

export interface RunScriptOptions {
  script: string;
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Runs `/bin/sh -c <script>` without a PTY, its output discarded (never
 * logged: it may print secrets). It leads its own process group, and the
 * whole group is killed on timeout or abort.
 */
export function runScript(opts: RunScriptOptions): Promise<ScriptOutcome> {
  return runChild("/bin/sh", ["-c", opts.script], opts, undefined);
}

/** Runs argv (no shell) in cwd like a script, keeping the tail of its stderr (Sandbox.runCommand). */
export async function runCommand(opts: SandboxCommand & { cwd: string }): Promise<CommandResult> {
  const [command, ...args] = opts.argv;
  const file = command === undefined ? undefined : resolveExecutable(command, opts.cwd, opts.env.PATH ?? "");
  if (file === undefined) return { outcome: { kind: "not_found" }, stderrTail: "" };
  const tail = new OutputTail();
  const outcome = await runChild(file, args, opts, tail);
  return { outcome, stderrTail: tail.text() };
}

function runChild(file: string, args: readonly string[], opts: Omit<RunScriptOptions, "script">, stderr: OutputTail | undefined): Promise<ScriptOutcome> {
  return new Promise((resolve) => {
    if (opts.signal?.aborted) {
      resolve({ kind: "aborted" });
      return;
    }
    const child = spawn(file, args, { cwd: opts.cwd, env: opts.env, stdio: ["ignore", "ignore", stderr ? "pipe" : "ignore"], detached: true });
    child.stderr?.on("data", (chunk: Buffer) => stderr?.push(chunk));
    let cause: "timeout" | "aborted" | undefined;
    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      cause = "timeout";
      killGroup();
    }, opts.timeoutMs);
    const onAbort = () => {
      cause ??= "aborted";
      killGroup();
    };
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    const settle = (outcome: ScriptOutcome) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      resolve(outcome);
    };
    child.once("error", () => settle({ kind: "spawn_error" }));
    // "close": the exit, and stderr read to its end (its tail is the error).
    child.once("close", (code, sig) => {
      if (cause) settle({ kind: cause });
      else if (code === 0) settle({ kind: "ok" });
      else settle({ kind: "exit", exitCode: code, signal: sig ?? undefined });
    });
  });
}
