import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";

/**
 * Runs one of the bench's own scripts (bench/src/<file>) as a process of its
 * own, from the repository root with the tsx loader: a baseline or a client
 * that must not share the measuring process's event loop. Its stdin and
 * stdout are piped, its stderr is the bench's.
 */
export function spawnBenchScript(file: string, args: string[]): ChildProcessByStdio<Writable, Readable, null> {
  const entry = new URL(`./${file}`, import.meta.url).pathname;
  const root = new URL("../..", import.meta.url).pathname;
  return spawn(process.execPath, ["--import", "tsx", entry, ...args], { cwd: root, stdio: ["pipe", "pipe", "inherit"] });
}
