/**
 * Cloning a session's repositories (`spec.repos`) into its workspace before
 * its init and apps run (decision 0048). Git runs inside the session's
 * sandbox (Sandbox.runCommand) as the session's user, with the session's
 * network and egress proxy: the spec chooses the URL, so the clone reaches
 * only what the session itself could. A token for a private repository
 * (`secretRef`) reaches git through its environment only (GIT_CONFIG_COUNT:
 * an `http.<origin>/.extraHeader`), never its command line or `.git/config`,
 * and is cut out of any error before it becomes the failed fact's reason.
 */
import { lstat } from "node:fs/promises";
import { join } from "node:path";
import { WorkspacePath, type RepoRef } from "@paddock/contracts";
import { BootError } from "../errors.ts";
import type { CommandResult, Sandbox } from "../sandbox/backend.ts";

/** How long one repository's clone may take (all its git steps together). */
export const DEFAULT_CLONE_TIMEOUT_MS = 600_000;
/** The longest failed reason a fact carries. */
const REASON_MAX = 512;
/** Of git's stderr, the last lines that say what went wrong. */
const TAIL_LINES = 3;

const SCHEMES = /^(?:https?|git|ssh|file):\/\//i;
/** `user@host:path`, as ssh URLs are often written. */
const SCP_LIKE = /^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/]/;
const FULL_COMMIT = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** Perhaps an abbreviated commit: tried as a branch or tag first. */
const SHORT_COMMIT = /^[0-9a-f]{7,39}$/;

export interface CloneOptions {
  sandbox: Pick<Sandbox, "workspace" | "runCommand">;
  repos: readonly RepoRef[];
  /** What git runs with: the session's base and proxy variables (no secret, no session token). */
  env: Record<string, string>;
  /** The session's secret values by name: a repository's secretRef is one of them (its environment's). */
  secrets: Readonly<Record<string, string>>;
  signal: AbortSignal;
  timeoutMs?: number;
}

export interface CloneResult {
  /** Workspace-relative directories cloned now. */
  cloned: string[];
  /** Directories that held a clone already (a restored or pushed workspace): left as they are. */
  skipped: string[];
}

/**
 * Clones each repository in order into its directory under the workspace,
 * shallow; skips a directory that holds a `.git` already. Throws BootError
 * with a bounded reason naming the repository's directory and git's last
 * words, never a credential.
 */
export async function cloneRepos(opts: CloneOptions): Promise<CloneResult> {
  const result: CloneResult = { cloned: [], skipped: [] };
  for (const [i, repo] of opts.repos.entries()) {
    const path = repoDir(repo, i);
    checkRepo(repo, path);
    // Only whether to skip is decided here (a lookup by path as the runner): git itself writes as the session's user.
    if (await lstat(join(opts.sandbox.workspace, path, ".git")).then(() => true, () => false)) {
      result.skipped.push(path);
      continue;
    }
    await cloneOne(opts, repo, path);
    result.cloned.push(path);
  }
  return result;
}

/** The workspace-relative directory a repository is cloned into: its `path`, or the URL's last component without `.git`. */
export function repoDir(repo: RepoRef, index: number): string {
  const given = repo.path ?? defaultDir(repo.url);
  if (given === undefined) throw new BootError(`repository ${index + 1}: its url names no directory; give it a path`);
  const parsed = WorkspacePath.safeParse(given);
  const segments = given.split("/").filter((s) => s !== "" && s !== ".");
  if (!parsed.success || segments.length === 0 || segments.some((s) => s === ".git" || /[\0-\x1f\x7f]/.test(s))) {
    throw new BootError(`repository ${index + 1}: path must be a directory inside the workspace (relative, no .., .git, NUL or backslash)`);
  }
  return segments.join("/");
}

function defaultDir(url: string): string | undefined {
  const name = url
    .replace(/[?#].*$/, "")
    .replace(/\/+$/, "")
    .split(/[/:]/)
    .pop()
    ?.replace(/\.git$/, "");
  return name === undefined || name === "" || name === "." || name === ".." ? undefined : name;
}

/** Refuses what git would read as an option or a refspec, and credentials in the URL (they belong in a secret). */
function checkRepo(repo: RepoRef, path: string): void {
  const refuse = (why: string) => {
    throw new BootError(`repository ${path}: ${why}`);
  };
  const { url, ref } = repo;
  if (/[\s\0-\x1f\x7f]/.test(url) || !(SCHEMES.test(url) || SCP_LIKE.test(url))) refuse("url must be https, http, git, ssh or file (or user@host:path)");
  if (/^https?:\/\//i.test(url)) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {
      refuse("url does not parse");
    }
    if (parsed?.password) refuse("url holds a password: put the token in a secret and name it as secretRef");
  } else if (repo.secretRef !== undefined) refuse("secretRef needs an http(s) url");
  if (ref !== undefined && (ref.startsWith("-") || ref.includes("..") || ref.endsWith("/") || ref.endsWith(".lock") || /[\s\0-\x1f\x7f~^:?*[\\]/.test(ref))) {
    refuse("ref is not a branch, tag or commit name");
  }
}

/** One repository: `git clone --depth 1` for the default branch, a branch or a tag; a fetch of exactly the commit for a full commit id. */
async function cloneOne(opts: CloneOptions, repo: RepoRef, path: string): Promise<void> {
  const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_CLONE_TIMEOUT_MS);
  const auth = authEnv(repo, path, opts.secrets);
  const env = { ...opts.env, ...auth.env, GIT_TERMINAL_PROMPT: "0" };
  const dir = `./${path}`;
  const git = async (step: string, args: string[]): Promise<CommandResult & { step: string }> => {
    const timeoutMs = Math.max(1, deadline - Date.now());
    // advice off: a detached checkout's paragraph would push the error out of the tail.
    return { step, ...(await opts.sandbox.runCommand({ argv: ["git", "-c", "advice.detachedHead=false", ...args], env, timeoutMs, signal: opts.signal })) };
  };
  const must = async (run: Promise<CommandResult & { step: string }>) => {
    const r = await run;
    if (r.outcome.kind !== "ok") throw new BootError(failure(path, r, opts.timeoutMs ?? DEFAULT_CLONE_TIMEOUT_MS, auth.secrets));
  };
  const ref = repo.ref;
  if (ref !== undefined && FULL_COMMIT.test(ref)) {
    await must(git("git init", ["init", "-q", dir]));
    await must(git("git remote add", ["-C", dir, "remote", "add", "origin", repo.url]));
    const exact = await git("git fetch", ["-C", dir, "fetch", "-q", "--depth", "1", "origin", ref]);
    // A server that refuses a fetch by commit id (no uploadpack.allowReachableSHA1InWant): its branches and tags in full, then the commit.
    if (exact.outcome.kind !== "ok") await must(git("git fetch", ["-C", dir, "fetch", "-q", "--tags", "origin"]));
    await must(git("git checkout", ["-C", dir, "checkout", "-q", "--detach", exact.outcome.kind === "ok" ? "FETCH_HEAD" : ref]));
    return;
  }
  const shallow = await git("git clone", ["clone", "-q", "--depth", "1", ...(ref !== undefined ? ["--branch", ref] : []), "--", repo.url, dir]);
  if (shallow.outcome.kind === "ok") return;
  // Not a branch or tag: perhaps an abbreviated commit, which only a full history resolves.
  if (ref === undefined || !SHORT_COMMIT.test(ref) || shallow.outcome.kind !== "exit") throw new BootError(failure(path, shallow, opts.timeoutMs ?? DEFAULT_CLONE_TIMEOUT_MS, auth.secrets));
  await must(git("git clone", ["clone", "-q", "--no-checkout", "--", repo.url, dir]));
  await must(git("git checkout", ["-C", dir, "checkout", "-q", "--detach", ref]));
}

/**
 * The token of a repository's secret as git's environment sees it: an
 * Authorization header for the URL's origin only (not sent to another host a
 * redirect names), in GIT_CONFIG_* variables git reads and never stores.
 */
function authEnv(repo: RepoRef, path: string, secrets: Readonly<Record<string, string>>): { env: Record<string, string>; secrets: string[] } {
  if (repo.secretRef === undefined) return { env: {}, secrets: [] };
  const token = secrets[repo.secretRef];
  if (token === undefined) throw new BootError(`repository ${path}: secret ${repo.secretRef} is not one of the session's environment's secrets`);
  const url = new URL(repo.url);
  const basic = Buffer.from(`x-access-token:${token}`).toString("base64");
  return {
    env: {
      GIT_CONFIG_COUNT: "1",
      GIT_CONFIG_KEY_0: `http.${url.protocol}//${url.host}/.extraHeader`,
      GIT_CONFIG_VALUE_0: `Authorization: Basic ${basic}`,
    },
    secrets: [token, basic],
  };
}

/** The failed reason: which repository, which step, how it ended, git's last lines (credentials cut out), at most REASON_MAX characters. */
export function failure(path: string, r: CommandResult & { step: string }, timeoutMs: number, secrets: readonly string[]): string {
  const head = `repository ${path}: `;
  switch (r.outcome.kind) {
    case "not_found":
      return `${head}git not found in the session's image`;
    case "timeout":
      return `${head}${r.step} timed out after ${Math.round(timeoutMs / 1000)}s`;
    case "aborted":
      return `${head}${r.step} aborted`;
    case "spawn_error":
      return `${head}${r.step} could not start`;
    case "ok":
      return `${head}${r.step} failed`;
    case "exit": {
      const how = r.outcome.exitCode === null ? `signal ${r.outcome.signal ?? "unknown"}` : `exit ${r.outcome.exitCode}`;
      const said = gitTail(r.stderrTail, secrets);
      const text = `${head}${r.step} failed (${how})${said ? `: ${said}` : ""}`;
      return text.length <= REASON_MAX ? text : `${text.slice(0, REASON_MAX - 1)}…`;
    }
  }
}

/** git's last few lines, on one line, without control characters, credentials in URLs, or the secrets given. */
function gitTail(stderr: string, secrets: readonly string[]): string {
  let text = stderr;
  for (const s of secrets) if (s !== "") text = text.split(s).join("***");
  const lines = text
    .split(/[\r\n]+/)
    .map((l) => l.replace(/[\0-\x1f\x7f]/g, "").trim())
    .filter((l) => l !== "");
  const tail = lines.slice(-TAIL_LINES).join(" | ");
  // user:password@ (or a token as the user) in any URL git quotes.
  const cut = tail.replace(/([a-z][a-z0-9+.-]*:\/\/)[^/@\s]*@/gi, "$1***@");
  return cut.length > REASON_MAX ? `…${cut.slice(cut.length - REASON_MAX)}` : cut;
}
