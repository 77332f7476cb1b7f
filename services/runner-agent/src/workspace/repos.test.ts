/**
 * Cloning spec.repos with real git (workspace/repos.ts) in a process-backend
 * sandbox, from file://, git daemon and git http-backend on loopback; and
 * the repos op's branch, head and dirty (repos-op.ts). The bwrap path (git
 * in the session's sandbox, through its egress proxy) is sessions/repos.test.ts.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync, type Dirent } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RepoRef } from "@paddock/contracts";
import { silentLogger } from "@paddock/logging";
import { makeSourceRepo, startGitDaemon, startGitHttpServer, type GitDaemon, type GitHttpServer, type SourceRepo } from "@paddock/testing";
import { BootError } from "../errors.ts";
import type { Sandbox } from "../sandbox/backend.ts";
import { createProcessBackend } from "../sandbox/process/backend.ts";
import { cloneRepos, repoDir } from "./repos.ts";
import { workspaceRepos } from "./repos-op.ts";

const PATH = process.env.PATH ?? "/usr/bin:/bin";
const TOKEN = "tok-sekrit-0123456789";
let src: SourceRepo;
let daemon: GitDaemon;
let http: GitHttpServer;
let privateHttp: GitHttpServer;
let n = 0;

beforeAll(async () => {
  src = makeSourceRepo();
  daemon = await startGitDaemon(src.root);
  http = await startGitHttpServer(src.root);
  privateHttp = await startGitHttpServer(src.root, { token: TOKEN });
});
afterAll(async () => {
  daemon.close();
  await http.close();
  await privateHttp.close();
});

async function sandbox(): Promise<Sandbox> {
  const dir = join(mkdtempSync(join(tmpdir(), "paddock-repos-")), `s${++n}`);
  return createProcessBackend({ log: silentLogger(), childPath: PATH }).create({ sessionId: `s${n}`, dir });
}

async function clone(repos: RepoRef[], secrets: Record<string, string> = {}, box?: Sandbox) {
  const sb = box ?? (await sandbox());
  const result = await cloneRepos({ sandbox: sb, repos, env: { PATH, HOME: sb.workspace }, secrets, signal: new AbortController().signal });
  return { sb, result, git: (path: string, ...args: string[]) => execFileSync("git", ["-C", join(sb.workspace, path), ...args], { encoding: "utf8" }).trim() };
}

async function refusal(repos: RepoRef[], secrets: Record<string, string> = {}): Promise<string> {
  const err = await clone(repos, secrets).then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(BootError);
  return (err as BootError).message;
}

/** Files under dir whose bytes contain any of needles. */
function filesHolding(dir: string, needles: string[]): string[] {
  return (readdirSync(dir, { recursive: true, withFileTypes: true }) as Dirent[])
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
    .filter((file) => needles.some((needle) => readFileSync(file).includes(needle)));
}

const fileUrl = () => `file://${join(src.root, `${src.name}.git`)}`;

describe("cloneRepos", () => {
  it("clones the default branch shallow into the url's name, and a branch, a tag and a commit into their paths", async () => {
    const { result, git } = await clone([
      { url: fileUrl() },
      { url: fileUrl(), ref: "feature", path: "work/feature" },
      { url: fileUrl(), ref: "v1", path: "tagged" },
      { url: fileUrl(), ref: src.commits.first, path: "pinned" },
    ]);
    expect(result).toEqual({ cloned: ["project", "work/feature", "tagged", "pinned"], skipped: [] });
    expect(git("project", "rev-parse", "HEAD")).toBe(src.commits.main);
    expect(git("project", "rev-parse", "--abbrev-ref", "HEAD")).toBe("main");
    expect(git("project", "rev-parse", "--is-shallow-repository")).toBe("true");
    expect(git("work/feature", "rev-parse", "HEAD")).toBe(src.commits.feature);
    expect(git("work/feature", "rev-parse", "--abbrev-ref", "HEAD")).toBe("feature");
    expect(git("tagged", "rev-parse", "HEAD")).toBe(src.commits.first);
    expect(git("pinned", "rev-parse", "HEAD")).toBe(src.commits.first);
    expect(git("pinned", "rev-parse", "--is-shallow-repository")).toBe("true");
  });

  it("clones from git daemon and from git http-backend on loopback, an abbreviated commit through the full history", async () => {
    const { git } = await clone([
      { url: `${daemon.url}/${src.name}.git`, ref: "feature" },
      { url: `${http.url}/${src.name}.git`, path: "over-http" },
      { url: `${http.url}/${src.name}.git`, ref: src.commits.first, path: "by-commit" },
      { url: `${daemon.url}/${src.name}.git`, ref: src.commits.first.slice(0, 10), path: "short" },
    ]);
    expect(git("project", "rev-parse", "HEAD")).toBe(src.commits.feature);
    expect(git("over-http", "rev-parse", "HEAD")).toBe(src.commits.main);
    expect(git("by-commit", "rev-parse", "HEAD")).toBe(src.commits.first);
    expect(git("short", "rev-parse", "HEAD")).toBe(src.commits.first);
  });

  it("skips a directory that holds a clone already", async () => {
    const first = await clone([{ url: fileUrl() }]);
    const again = await clone([{ url: fileUrl() }, { url: fileUrl(), ref: "v1", path: "other" }], {}, first.sb);
    expect(again.result).toEqual({ cloned: ["other"], skipped: ["project"] });
  });

  it("a private repository: the token reaches the server as a header from git's environment, and nowhere in .git", async () => {
    const { sb, git } = await clone([{ url: `${privateHttp.url}/${src.name}.git`, secretRef: "GIT_TOKEN" }], { GIT_TOKEN: TOKEN });
    expect(git("project", "rev-parse", "HEAD")).toBe(src.commits.main);
    expect(privateHttp.authorizations).toContain(`Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString("base64")}`);
    expect(filesHolding(join(sb.workspace, "project", ".git"), [TOKEN, Buffer.from(`x-access-token:${TOKEN}`).toString("base64")])).toEqual([]);
    expect(readFileSync(join(sb.workspace, "project", ".git", "config"), "utf8")).not.toContain("extraHeader");
  });

  it("a wrong token fails with git's words and without the token; a secret the environment does not give is named", async () => {
    const wrong = "wrong-token-abcdef";
    const reason = await refusal([{ url: `${privateHttp.url}/${src.name}.git`, secretRef: "GIT_TOKEN" }], { GIT_TOKEN: wrong });
    expect(reason).toMatch(/^repository project: git clone failed \(exit 128\): /);
    expect(reason).not.toContain(wrong);
    expect(reason).not.toContain(Buffer.from(`x-access-token:${wrong}`).toString("base64"));
    expect(reason.length).toBeLessThanOrEqual(512);
    expect(await refusal([{ url: `${privateHttp.url}/${src.name}.git`, secretRef: "OTHER" }])).toBe("repository project: secret OTHER is not one of the session's environment's secrets");
  });

  it("a failing clone says which repository and git's last words", async () => {
    expect(await refusal([{ url: `${http.url}/missing.git` }])).toMatch(/^repository missing: git clone failed \(exit 128\): .*not found/);
    expect(await refusal([{ url: fileUrl(), ref: "no-such-branch" }])).toMatch(/^repository project: git clone failed \(exit 128\): .*Remote branch no-such-branch not found/);
    expect(await refusal([{ url: fileUrl(), ref: "0".repeat(40), path: "zeros" }])).toMatch(/^repository zeros: git checkout failed \(exit 128\)/);
  });

  it("refuses a path out of the workspace, a url that is no clone url or holds a password, and a ref git would read as an option", async () => {
    for (const path of ["../out", "/abs", "a/../../b", ".", "x/.git", "a\\b"]) expect(await refusal([{ url: fileUrl(), path }])).toMatch(/path must be a directory inside the workspace/);
    expect(await refusal([{ url: "-uoops" }])).toMatch(/url must be https, http, git, ssh or file/);
    expect(await refusal([{ url: "ext::sh -c touch% /tmp/pwned" }])).toMatch(/url must be/);
    expect(await refusal([{ url: "https://user:hunter2@example.com/r.git" }])).toBe("repository r: url holds a password: put the token in a secret and name it as secretRef");
    expect(await refusal([{ url: fileUrl(), ref: "--upload-pack=touch /tmp/x" }])).toMatch(/ref is not a branch, tag or commit name/);
    expect(await refusal([{ url: fileUrl(), secretRef: "T" }], { T: "x" })).toMatch(/secretRef needs an http\(s\) url/);
    expect(repoDir({ url: "git@example.com:org/thing.git" }, 0)).toBe("thing");
    expect(repoDir({ url: "https://example.com/org/thing/" }, 0)).toBe("thing");
  });

  it("says so when the image has no git", async () => {
    const sb = await sandbox();
    const err = await cloneRepos({ sandbox: sb, repos: [{ url: fileUrl() }], env: { PATH: "/nonexistent", HOME: sb.workspace }, secrets: {}, signal: new AbortController().signal }).catch((e: unknown) => e);
    expect((err as Error).message).toBe("repository project: git not found in the session's image");
  });
});

describe("workspaceRepos", () => {
  it("answers each repository's path, branch, head and whether it is dirty", async () => {
    const { sb } = await clone([{ url: fileUrl() }, { url: fileUrl(), ref: "v1", path: "nested/tagged" }, { url: fileUrl(), ref: "feature", path: "feat" }]);
    writeFileSync(join(sb.workspace, "project", "README.md"), "changed\n");
    writeFileSync(join(sb.workspace, "feat", "untracked.txt"), "new\n");
    mkdirSync(join(sb.workspace, "empty"));
    execFileSync("git", ["init", "-q", join(sb.workspace, "empty")]);
    const reply = await workspaceRepos(sb.workspace, { maxRepos: 10, pathEnv: PATH });
    const byPath = Object.fromEntries(reply.repos.map((r) => [r.path, r]));
    expect(reply.truncated).toBe(false);
    expect(byPath.project).toEqual({ path: "project", branch: "main", head: src.commits.main, dirty: true });
    expect(byPath["nested/tagged"]).toEqual({ path: "nested/tagged", branch: null, head: src.commits.first, dirty: false });
    expect(byPath.feat).toEqual({ path: "feat", branch: "feature", head: src.commits.feature, dirty: true });
    expect(byPath.empty).toMatchObject({ branch: expect.any(String), head: null, dirty: false });
    expect(existsSync(join(sb.workspace, "project", ".git", "index.lock"))).toBe(false);
  });
});
