import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { scratchDirs } from "@paddock/testing";
import { afterEach, describe, expect, it } from "vitest";
import { workspaceDiff } from "./git-diff.ts";

const dirs = scratchDirs("paddock-gitdiff-");
afterEach(dirs.removeAll);

const PATH = process.env.PATH ?? "/usr/bin:/bin";
const bounds = { maxRepoBytes: 64 * 1024, maxBytes: 256 * 1024, maxRepos: 8, pathEnv: PATH };

function git(cwd: string, ...args: string[]): void {
  execFileSync("git", ["-c", "user.email=t@example.com", "-c", "user.name=t", ...args], { cwd, stdio: "ignore", env: { PATH, HOME: cwd, GIT_CONFIG_NOSYSTEM: "1" } });
}

/** A workspace holding repo `app` with one committed file, then changed (so the diff must read it). */
function workspaceWithRepo(): { workspace: string; repo: string } {
  const workspace = dirs.make();
  const repo = join(workspace, "app");
  mkdirSync(repo);
  git(repo, "init", "-q");
  writeFileSync(join(repo, "f.txt"), "one\n");
  git(repo, "add", "f.txt");
  git(repo, "commit", "-q", "-m", "init");
  writeFileSync(join(repo, "f.txt"), "one\ntwo\n");
  return { workspace, repo };
}

describe("workspace diff never runs what the repository configures", () => {
  it("ignores filters, diff drivers, textconv, external diff, fsmonitor, hooks, pager, includes and a .gitconfig in the repository", async () => {
    const { workspace, repo } = workspaceWithRepo();
    const markers = dirs.make();
    const run = (name: string) => `touch ${join(markers, name)}; cat`;
    const included = join(repo, "included.cfg");
    writeFileSync(included, `[filter "inc"]\n\tclean = ${run("include-clean")}\n`);
    const config = [
      `[core]`,
      `\tfsmonitor = ${join(markers, "fsmonitor")}`,
      `\thooksPath = ${join(repo, "hooks")}`,
      `\tpager = ${run("pager")}`,
      `\taskPass = ${run("askpass")}`,
      `\tattributesFile = ${join(repo, "attrs")}`,
      `[filter "evil"]`,
      `\tclean = ${run("filter-clean")}`,
      `\tsmudge = ${run("filter-smudge")}`,
      `\tprocess = ${run("filter-process")}`,
      `\trequired = true`,
      `[diff]`,
      `\texternal = ${run("diff-external")}`,
      `[diff "evil"]`,
      `\tcommand = ${run("diff-command")}`,
      `\ttextconv = ${run("textconv")}`,
      `[include]`,
      `\tpath = ${included}`,
      `[includeIf "gitdir:/"]`,
      `\tpath = ${included}`,
      `[pager]`,
      `\tdiff = ${run("pager-diff")}`,
    ].join("\n");
    writeFileSync(join(repo, ".git", "config"), `${readFileSync(join(repo, ".git", "config"), "utf8")}\n${config}\n`);
    writeFileSync(join(repo, ".gitattributes"), "* filter=evil diff=evil\n*.txt filter=inc\n");
    writeFileSync(join(repo, "attrs"), "* filter=evil diff=evil\n");
    mkdirSync(join(repo, "hooks"));
    for (const hook of ["post-index-change", "pre-commit", "reference-transaction"]) {
      writeFileSync(join(repo, "hooks", hook), `#!/bin/sh\ntouch ${join(markers, hook)}\n`);
      chmodSync(join(repo, "hooks", hook), 0o755);
    }
    // Read as git's "global" configuration when HOME is the repository.
    writeFileSync(join(repo, ".gitconfig"), `[filter "evil"]\n\tclean = ${run("home-gitconfig")}\n`);

    const reply = await workspaceDiff(workspace, bounds);
    expect(readdirSync(markers)).toEqual([]);
    expect(reply.repos).toHaveLength(1);
    expect(reply.repos[0]?.error).toBeUndefined();
    expect(reply.repos[0]?.diff).toContain("+two");
  });

  it("never runs a git the sandbox put in the repository, even with a relative entry on the runner's PATH", async () => {
    const { workspace, repo } = workspaceWithRepo();
    const markers = dirs.make();
    writeFileSync(join(repo, "git"), `#!/bin/sh\ntouch ${join(markers, "sandbox-git")}\n`);
    chmodSync(join(repo, "git"), 0o755);
    const reply = await workspaceDiff(workspace, { ...bounds, pathEnv: `.::${PATH}` });
    expect(readdirSync(markers)).toEqual([]);
    expect(reply.repos[0]?.diff).toContain("+two");
  });

  it("reads HEAD through a branch, packed refs and a detached commit; an unborn branch has no commit yet", async () => {
    const { workspace, repo } = workspaceWithRepo();
    expect((await workspaceDiff(workspace, bounds)).repos[0]?.diff).toContain("+two");
    git(repo, "pack-refs", "--all");
    expect((await workspaceDiff(workspace, bounds)).repos[0]?.diff).toContain("+two");
    git(repo, "checkout", "-q", "--detach");
    expect((await workspaceDiff(workspace, bounds)).repos[0]?.diff).toContain("+two");
    const empty = join(workspace, "empty");
    mkdirSync(empty);
    git(empty, "init", "-q");
    const reply = await workspaceDiff(workspace, bounds);
    expect(reply.repos.find((r) => r.path === "empty")?.error).toMatch(/no commit yet/);
  });

  it.runIf(process.getuid?.() === 0)("runs git as the session's user when it is not the runner's, with no capabilities and no_new_privs", async () => {
    const { workspace } = workspaceWithRepo();
    // A git on PATH that records who ran it, then runs the real one.
    const bin = dirs.make();
    const record = dirs.make();
    for (const d of [workspace, join(workspace, "app"), bin, record]) chmodSync(d, 0o777);
    const realGit = execFileSync("sh", ["-c", "command -v git"], { env: { PATH } }).toString().trim();
    // uid, then no_new_privs and the inheritable and ambient sets: a runner of its own non-root user keeps ambient capabilities across a plain setuid (decision 0043).
    const caps = `$(grep -E '^(NoNewPrivs|CapInh|CapAmb):' /proc/self/status | tr -s '\\t\\n' '  ')`;
    writeFileSync(join(bin, "git"), `#!/bin/sh\necho "$(id -u) ${caps}" >> ${join(record, "uids")}\nexec ${realGit} "$@"\n`);
    chmodSync(join(bin, "git"), 0o755);
    execFileSync("chmod", ["-R", "a+rwX", workspace]);
    const reply = await workspaceDiff(workspace, { ...bounds, pathEnv: `${bin}:${PATH}`, runAs: { uid: 65534, gid: 65534 } });
    expect(readFileSync(join(record, "uids"), "utf8").trim().split("\n")).toEqual(["65534 CapInh: 0000000000000000 CapAmb: 0000000000000000 NoNewPrivs: 1"]);
    expect(reply.repos[0]?.diff).toContain("+two");
  });
});
