import { spawn } from "node:child_process";
import type { ScriptOutcome } from "../backend.ts";

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
  return new Promise((resolve) => {
    if (opts.signal?.aborted) {
      resolve({ kind: "aborted" });
      return;
    }
    const child = spawn("/bin/sh", ["-c", opts.script], { cwd: opts.cwd, env: opts.env, stdio: "ignore", detached: true });
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
    child.once("exit", (code, sig) => {
      if (cause) settle({ kind: cause });
      else if (code === 0) settle({ kind: "ok" });
      else settle({ kind: "exit", exitCode: code, signal: sig ?? undefined });
    });
  });
}
