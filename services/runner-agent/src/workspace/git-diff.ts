import { spawn } from "node:child_process";
import { lstat, readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import type { RepoDiff, WorkspaceDiffReply } from "@paddock/contracts";
import { DirFd, UnsafePathError } from "@paddock/archive";
import { asUser, diffEnv, gitExecutable, headCommit, isolatedGitDir, toolOnPath, type RunAs } from "./git-isolated.ts";

export interface DiffBounds {
  /** JSON-encoded bytes of one repository's diff at most. */
  maxRepoBytes: number;
  /** JSON-encoded bytes of all diffs at most. */
  maxBytes: number;
  maxRepos: number;
  /** How deep under the workspace repositories are looked for. */
  maxDepth?: number;
  /** How long one git may run. */
  timeoutMs?: number;
  /** PATH to find git on. */
  pathEnv: string;
  /** The session's user, when it is not the runner's own (git never runs as a more privileged one). */
  runAs?: RunAs | undefined;
}

/** Directories never searched for repositories. */
const SKIP: ReadonlySet<string> = new Set([".git", "node_modules"]);

/**
 * The git repositories of a workspace: directories holding a `.git` (a
 * directory, or a file for worktrees and submodules), breadth first, without
 * following symlinks, up to maxRepos + 1 (one more says "there are more").
 */
export async function findRepos(workspace: string, maxRepos: number, maxDepth = 4): Promise<string[]> {
  const repos: string[] = [];
  let level = [workspace];
  let visited = 0;
  for (let depth = 0; depth <= maxDepth && level.length > 0 && repos.length <= maxRepos; depth++) {
    const next: string[] = [];
    for (const dir of level) {
      if (++visited > 10_000) return repos;
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch {
        continue;
      }
      if (entries.some((e) => e.name === ".git" && (e.isDirectory() || e.isFile()))) {
        repos.push(dir);
        if (repos.length > maxRepos) return repos;
      }
      for (const e of entries) if (e.isDirectory() && !SKIP.has(e.name)) next.push(join(dir, e.name));
    }
    level = next;
  }
  return repos;
}

interface GitOutput {
  text: string;
  truncated: boolean;
  code: number | null;
  stderr: string;
}

/**
 * Runs git in dir with exactly env (as runAs, when given) and keeps at most
 * maxBytes of stdout (then kills it). The callers point git at an isolated git
 * directory (git-isolated.ts), so the repository's own configuration is never
 * read; fsmonitor and hooks are switched off on top, and optional locks are
 * not taken.
 */
export function runGit(dir: string, args: string[], opts: { maxBytes: number; timeoutMs: number; env: NodeJS.ProcessEnv; runAs?: RunAs | undefined }): Promise<GitOutput> {
  const { maxBytes, timeoutMs } = opts;
  return new Promise((resolve) => {
    const git = gitExecutable(opts.env.PATH ?? "");
    if (git === undefined) {
      resolve({ text: "", truncated: false, code: -1, stderr: "git not found on PATH" });
      return;
    }
    const gitArgs = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-optional-locks", ...args];
    let run = { file: git, args: gitArgs };
    if (opts.runAs) {
      const setpriv = toolOnPath("setpriv", opts.env.PATH ?? "");
      if (setpriv === undefined) {
        resolve({ text: "", truncated: false, code: -1, stderr: "setpriv not found on PATH" });
        return;
      }
      run = asUser(setpriv, opts.runAs, git, gitArgs);
    }
    const child = spawn(run.file, run.args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"], env: opts.env });
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    let stderr = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (chunk: Buffer) => {
      if (truncated) return;
      const room = maxBytes - size;
      if (chunk.length > room) {
        chunks.push(chunk.subarray(0, room));
        size = maxBytes;
        truncated = true;
        child.kill("SIGKILL");
        return;
      }
      chunks.push(chunk);
      size += chunk.length;
    });
    child.stderr.on("data", (chunk: Buffer) => {
      if (stderr.length < 512) stderr += chunk.toString("utf8");
    });
    const finish = (code: number | null) => {
      clearTimeout(timer);
      resolve({ text: Buffer.concat(chunks).toString("utf8"), truncated, code, stderr: stderr.slice(0, 512) });
    };
    child.once("error", () => finish(-1));
    child.once("close", (code) => finish(code));
  });
}

/** Cuts text so that its JSON encoding is at most limit bytes. */
function fitJson(text: string, limit: number): { text: string; cut: boolean } {
  let out = text;
  let cut = false;
  for (let size = Buffer.byteLength(JSON.stringify(out)); size > limit && out.length > 0; size = Buffer.byteLength(JSON.stringify(out))) {
    out = out.slice(0, Math.max(0, out.length - Math.max(1, Math.ceil((size - limit) / 2))));
    cut = true;
  }
  return { text: out, cut };
}

/**
 * `git diff HEAD` of every repository in the workspace, bounded per
 * repository and in total (by JSON-encoded size, so the reply fits a message).
 */
export async function workspaceDiff(workspace: string, bounds: DiffBounds): Promise<WorkspaceDiffReply> {
  const timeoutMs = bounds.timeoutMs ?? 20_000;
  // The workspace itself swapped for a link is refused (as push and pull refuse it), never searched.
  try {
    DirFd.open(workspace, { follow: false }).close();
  } catch {
    throw new UnsafePathError("workspace is not available", true);
  }
  const found = await findRepos(workspace, bounds.maxRepos, bounds.maxDepth);
  let truncated = found.length > bounds.maxRepos;
  const repos: RepoDiff[] = [];
  let budget = bounds.maxBytes;
  for (const dir of found.slice(0, bounds.maxRepos)) {
    const path = relative(workspace, dir) || ".";
    // A .git that is a symlink could point at another repository on the host.
    const dotGit = await lstat(join(dir, ".git")).catch(() => undefined);
    if (!dotGit || dotGit.isSymbolicLink()) continue;
    if (budget <= 2) {
      truncated = true;
      repos.push({ path, diff: "", truncated: true });
      continue;
    }
    if (!dotGit.isDirectory()) {
      repos.push({ path, diff: "", truncated: false, error: "a .git file (linked worktree or submodule) is not diffed" });
      continue;
    }
    // HEAD is read here, and git sees the objects through a scratch git directory: never the repository's own config.
    const commit = headCommit(dir);
    if (commit === undefined) {
      repos.push({ path, diff: "", truncated: false, error: "no commit yet (HEAD does not exist)" });
      continue;
    }
    const limit = Math.min(bounds.maxRepoBytes, budget);
    const gitDir = isolatedGitDir(dir, commit, bounds.runAs);
    let out: GitOutput;
    try {
      out = await runGit(dir, ["diff", commit, "--no-color", "--no-ext-diff", "--no-textconv", "--"], {
        maxBytes: limit,
        timeoutMs,
        env: diffEnv(dir, gitDir.path, bounds.pathEnv),
        runAs: bounds.runAs,
      });
    } finally {
      gitDir.remove();
    }
    if (!out.truncated && out.code !== 0) {
      repos.push({ path, diff: "", truncated: false, error: `git diff failed${out.stderr ? `: ${out.stderr.trim()}` : ""}`.slice(0, 512) });
      continue;
    }
    const fitted = fitJson(out.text, limit);
    budget -= Buffer.byteLength(JSON.stringify(fitted.text));
    repos.push({ path, diff: fitted.text, truncated: out.truncated || fitted.cut });
  }
  return { repos, truncated };
}
