/**
 * A repository of the sandbox, read without its configuration. Everything in
 * `.git` is the sandbox's to write: its config can name programs git runs
 * (`filter.<driver>.clean/process`, `diff.external`, `diff.<driver>.command`
 * and `textconv`, `core.fsmonitor`, `core.hooksPath`, `core.pager`,
 * `include.path` pulling in more), so git is never pointed at it. Instead the
 * diff runs against a scratch git directory this runner writes: a config of
 * its own (no drivers, so `.gitattributes` can name none that exist), HEAD
 * detached at the commit read here (descriptor-relative, no link followed),
 * and the repository's objects reached read-only through
 * `objects/info/alternates`. No system, global or $HOME configuration is read
 * either (diffEnv).
 */
import { accessSync, chownSync, closeSync, constants as fsc, mkdirSync, mkdtempSync, readSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join } from "node:path";
import { DirFd } from "@paddock/archive";
import type { SandboxUser } from "../sandbox/backend.ts";

/** The user git runs as: the session's, never more privileged (the process backend's sessions run as the runner itself). */
export type RunAs = SandboxUser;

const HEX_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** Loose ref files and HEAD are tiny; packed-refs of a large repository is not, but is bounded. */
const MAX_REF_FILE_BYTES = 4096;
const MAX_PACKED_REFS_BYTES = 32 * 1024 * 1024;
const MAX_SYMREF_DEPTH = 5;

/** A regular file in dir (opened by descriptor, no link followed), up to maxBytes; undefined when missing or not a file. */
function readSmall(dir: DirFd, name: string, maxBytes: number): string | undefined {
  const opened = dir.openEntry(name);
  if (opened === undefined || opened === "symlink") return undefined;
  try {
    if (!opened.stat.isFile() || opened.stat.size > maxBytes) return undefined;
    const buf = Buffer.alloc(opened.stat.size);
    let got = 0;
    while (got < buf.length) {
      const n = readSync(opened.fd, buf, got, buf.length - got, got);
      if (n === 0) break;
      got += n;
    }
    return buf.subarray(0, got).toString("utf8");
  } finally {
    closeSync(opened.fd);
  }
}

/** A loose ref's contents: refs/… walked one directory at a time under the held git directory. */
function looseRef(git: DirFd, segments: readonly string[]): string | undefined {
  const held: DirFd[] = [];
  try {
    let dir = git;
    for (const segment of segments.slice(0, -1)) {
      dir = dir.child(segment);
      held.push(dir);
    }
    return readSmall(dir, segments[segments.length - 1] as string, MAX_REF_FILE_BYTES);
  } catch {
    return undefined;
  } finally {
    for (const d of held) d.close();
  }
}

/** The commit a ref names: loose first, then packed-refs; symbolic refs followed a few deep. */
function resolveRef(git: DirFd, ref: string, depth: number): string | undefined {
  const segments = ref.split("/");
  if (depth > MAX_SYMREF_DEPTH || segments[0] !== "refs" || segments.some((s) => s === "" || s === "." || s === ".." || s.includes("\0"))) return undefined;
  const loose = looseRef(git, segments)?.trim();
  if (loose !== undefined) {
    if (HEX_ID.test(loose)) return loose;
    const symbolic = /^ref: (\S+)$/.exec(loose);
    return symbolic ? resolveRef(git, symbolic[1] as string, depth + 1) : undefined;
  }
  for (const line of (readSmall(git, "packed-refs", MAX_PACKED_REFS_BYTES) ?? "").split("\n")) {
    const [id, name] = line.split(" ");
    if (name === ref && id !== undefined && HEX_ID.test(id)) return id;
  }
  return undefined;
}

/**
 * The commit HEAD names in repoDir/.git (a directory, not a link), read by this
 * runner without git; undefined when there is none yet (or it cannot be read).
 */
export function headCommit(repoDir: string): string | undefined {
  let repo: DirFd | undefined;
  let git: DirFd | undefined;
  try {
    repo = DirFd.open(repoDir, { follow: false });
    git = repo.child(".git");
    const head = readSmall(git, "HEAD", MAX_REF_FILE_BYTES)?.trim();
    if (head === undefined) return undefined;
    if (HEX_ID.test(head)) return head;
    const symbolic = /^ref: (\S+)$/.exec(head);
    return symbolic ? resolveRef(git, symbolic[1] as string, 0) : undefined;
  } catch {
    return undefined;
  } finally {
    git?.close();
    repo?.close();
  }
}

/** The branch HEAD is on in repoDir/.git (`refs/heads/<branch>`), read without git; undefined when detached or unreadable. */
export function headBranch(repoDir: string): string | undefined {
  let repo: DirFd | undefined;
  let git: DirFd | undefined;
  try {
    repo = DirFd.open(repoDir, { follow: false });
    git = repo.child(".git");
    const symbolic = /^ref: refs\/heads\/(\S+)$/.exec(readSmall(git, "HEAD", MAX_REF_FILE_BYTES)?.trim() ?? "");
    return symbolic?.[1];
  } catch {
    return undefined;
  } finally {
    git?.close();
    repo?.close();
  }
}

export interface IsolatedGitDir {
  /** GIT_DIR for git. */
  path: string;
  remove(): void;
}

/**
 * A scratch git directory that shows repoDir's objects at commit, with a
 * configuration written here; owned by runAs so git running as that user can
 * read it.
 */
export function isolatedGitDir(repoDir: string, commit: string, runAs: RunAs | undefined): IsolatedGitDir {
  // A newline would start another line of the alternates file.
  if (repoDir.includes("\n")) throw new Error("repository path contains a newline");
  const path = mkdtempSync(join(tmpdir(), "paddock-git-"));
  const remove = () => rmSync(path, { recursive: true, force: true });
  try {
    mkdirSync(join(path, "refs"));
    mkdirSync(join(path, "objects", "info"), { recursive: true });
    writeFileSync(join(path, "HEAD"), `${commit}\n`);
    const sha256 = commit.length === 64;
    writeFileSync(
      join(path, "config"),
      `[core]\n\trepositoryformatversion = ${sha256 ? 1 : 0}\n\tbare = false\n${sha256 ? "[extensions]\n\tobjectformat = sha256\n" : ""}`,
    );
    writeFileSync(join(path, "objects", "info", "alternates"), `${join(repoDir, ".git", "objects")}\n`);
    if (runAs) for (const p of ["", "refs", "objects", "objects/info", "HEAD", "config", "objects/info/alternates"]) chownSync(join(path, p), runAs.uid, runAs.gid);
    return { path, remove };
  } catch (err) {
    remove();
    throw err;
  }
}

/** PATH without relative entries: git runs in the sandbox's repository, where "." or "" would find the sandbox's own `git`. */
export function absolutePath(pathEnv: string): string {
  return pathEnv
    .split(":")
    .filter((p) => isAbsolute(p))
    .join(":");
}

/** The executable name (git, setpriv) on the absolute entries of pathEnv; undefined when there is none. */
export function toolOnPath(name: string, pathEnv: string): string | undefined {
  for (const dir of absolutePath(pathEnv).split(":")) {
    if (dir === "") continue;
    try {
      accessSync(join(dir, name), fsc.X_OK);
      return join(dir, name);
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** The git executable on the absolute entries of pathEnv; undefined when there is none. */
export function gitExecutable(pathEnv: string): string | undefined {
  return toolOnPath("git", pathEnv);
}

/**
 * The argv that runs file as runAs with no capabilities: setpriv drops to the
 * uid and gid (no supplementary groups), clears the inheritable (and so the
 * ambient) set and sets no_new_privs. Spawning with Node's uid/gid options
 * instead would keep ambient capabilities across a change between two
 * non-root uids (a runner run as a user of its own, decision 0043): git would
 * read the session's repository with the runner's CAP_DAC_OVERRIDE.
 */
export function asUser(setpriv: string, runAs: RunAs, file: string, args: readonly string[]): { file: string; args: string[] } {
  return { file: setpriv, args: [`--reuid=${runAs.uid}`, `--regid=${runAs.gid}`, "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--", file, ...args] };
}

/** The whole environment of a git run on a sandbox repository: nothing inherited, no configuration but the scratch directory's. */
export function diffEnv(repoDir: string, gitDir: string, pathEnv: string): NodeJS.ProcessEnv {
  return {
    PATH: absolutePath(pathEnv),
    GIT_DIR: gitDir,
    GIT_WORK_TREE: repoDir,
    GIT_INDEX_FILE: join(repoDir, ".git", "index"),
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_ATTR_NOSYSTEM: "1",
    GIT_NO_REPLACE_OBJECTS: "1",
    GIT_OPTIONAL_LOCKS: "0",
    GIT_TERMINAL_PROMPT: "0",
    HOME: gitDir,
    LANG: "C.UTF-8",
  };
}
