/**
 * GET /v1/sessions/:id/repos on the runner: each repository of the workspace
 * (found as diff finds them), its branch and head read here without git
 * (descriptor-relative, git-isolated.ts), and whether it is dirty from
 * `git status` run against a scratch git directory as the session's user,
 * so the repository's configuration names nothing git would run.
 */
import { lstat, readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { RepoStatus, WorkspaceReposReply, WorkspaceReposRequest, workspaceRpcs } from "@paddock/contracts";
import { DirFd, UnsafePathError } from "@paddock/archive";
import { serveRpc, type BusMetrics } from "@paddock/bus";
import type { Logger } from "@paddock/logging";
import type { SandboxUser } from "../sandbox/backend.ts";
import { findRepos, runGit } from "./git-diff.ts";
import { diffEnv, headBranch, headCommit, isolatedGitDir, type RunAs } from "./git-isolated.ts";

export interface ReposBounds {
  maxRepos: number;
  /** How deep under the workspace repositories are looked for. */
  maxDepth?: number;
  /** How long one git may run. */
  timeoutMs?: number;
  /** PATH to find git on. */
  pathEnv: string;
  /** The session's user, when it is not the runner's own. */
  runAs?: RunAs | undefined;
}

export interface ReposOpContext {
  nc: NatsConnection;
  rpcs: ReturnType<typeof workspaceRpcs>;
  /** The held session a request names (a conflict for another placement). */
  held: (t: WorkspaceReposRequest) => { workspaceTask<T>(fn: (workspace: string, user: SandboxUser | undefined) => Promise<T>): Promise<T> };
  bounds: Omit<ReposBounds, "runAs">;
  serve: { queue: string; metrics: BusMetrics; log: Logger };
  /** The runner's errors as the public vocabulary. */
  translate: <T>(fn: () => Promise<T>) => Promise<T>;
}

/** Serves the `repos` workspace op: inside the session's workspace task, as the session's user. */
export function serveReposOp(c: ReposOpContext): Subscription {
  return serveRpc(c.nc, c.rpcs.repos, (req) => c.translate(() => c.held(req).workspaceTask((workspace, user) => workspaceRepos(workspace, { ...c.bounds, runAs: user }))), c.serve);
}

export async function workspaceRepos(workspace: string, bounds: ReposBounds): Promise<WorkspaceReposReply> {
  // The workspace itself swapped for a link is refused, never searched (as diff).
  try {
    DirFd.open(workspace, { follow: false }).close();
  } catch {
    throw new UnsafePathError("workspace is not available", true);
  }
  const found = await findRepos(workspace, bounds.maxRepos, bounds.maxDepth);
  const repos: RepoStatus[] = [];
  for (const dir of found.slice(0, bounds.maxRepos)) {
    const path = relative(workspace, dir) || ".";
    const dotGit = await lstat(join(dir, ".git")).catch(() => undefined);
    // A .git that is a symlink could point at another repository on the host.
    if (!dotGit || dotGit.isSymbolicLink()) continue;
    if (!dotGit.isDirectory()) {
      repos.push({ path, branch: null, head: null, dirty: false, error: "a .git file (linked worktree or submodule) is not read" });
      continue;
    }
    repos.push(await repoStatus(dir, path, bounds));
  }
  return { repos, truncated: found.length > bounds.maxRepos };
}

async function repoStatus(dir: string, path: string, bounds: ReposBounds): Promise<RepoStatus> {
  const branch = headBranch(dir) ?? null;
  const head = headCommit(dir) ?? null;
  // No commit yet: everything in the work tree is new, so the repository is dirty when it holds anything but .git.
  if (head === null) return { path, branch, head, dirty: await holdsFiles(dir) };
  const gitDir = isolatedGitDir(dir, head, bounds.runAs);
  try {
    // One byte of output says it: git is stopped there.
    const out = await runGit(dir, ["status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all"], {
      maxBytes: 1,
      timeoutMs: bounds.timeoutMs ?? 20_000,
      env: diffEnv(dir, gitDir.path, bounds.pathEnv),
      runAs: bounds.runAs,
    });
    if (out.truncated || out.code === 0) return { path, branch, head, dirty: out.truncated || out.text.length > 0 };
    return { path, branch, head, dirty: false, error: `git status failed${out.stderr ? `: ${out.stderr.trim()}` : ""}`.slice(0, 512) };
  } finally {
    gitDir.remove();
  }
}

async function holdsFiles(dir: string): Promise<boolean> {
  return (await readdir(dir).catch(() => [])).some((name) => name !== ".git");
}
