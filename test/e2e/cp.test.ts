/**
 * `paddock cp` against the real stack (issue 24 item 6), with the semantics
 * of docker cp, one case at a time and both ways: a file to a path that does
 * not exist is written as that file, into an existing directory under its
 * own name, to a missing `dir/` is refused; a directory is copied under its
 * own name into an existing one, made when missing, `SRC/.` copies its
 * contents; `-` is a tar stream on stdin or stdout. Modes are kept. The
 * session runs on the runner's default backend; what lands in the workspace
 * is checked on the host.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@paddock/testing";
import { expectUsageError, runCli, startCli } from "../../cli/src/testing/run-cli.ts";
import { stackClient } from "./helpers.ts";

let stack: Stack;
let sessionId: string;
let cli: Record<string, string>;
let local: string;

const { createSession, outputOf } = stackClient(() => stack);
const cp = (src: string, dst: string, stdin?: Buffer) => runCli(["cp", src, dst], cli, stdin);
const r = (path: string) => `${sessionId}:${path}`;
/** Where the runner keeps the session's workspace on the host. */
const onHost = (path: string) => join(stack.dataDir, "runner-1", "sessions", sessionId, "workspace", path);
const modeOf = (path: string) => statSync(path).mode & 0o777;
/** Every path under dir, sorted, directories with a trailing /. */
const tree = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true, recursive: true })
    .map((e) => `${join(e.parentPath, e.name).slice(dir.length + 1)}${e.isDirectory() ? "/" : ""}`)
    .sort();
const tarList = (tar: Buffer) => execFileSync("tar", ["-t"], { input: tar }).toString().trim().split("\n").sort();

beforeAll(async () => {
  stack = await startStack();
  cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
  const script = ["set -e", "mkdir -p existing/dir remote/sub", "printf old > existing/file.txt", "printf tool > remote/run.sh; chmod 750 remote/run.sh", "printf deep > remote/sub/deep.txt", "echo READY", "exec sleep 600"].join("\n");
  sessionId = (await createSession({ spec: { cmd: ["bash", "-c", script] } })).id;
  await outputOf(sessionId, (t) => t.includes("READY"));
  local = mkdtempSync(join(tmpdir(), "paddock-cp-e2e-"));
  writeFileSync(join(local, "script.sh"), "#!/bin/sh\necho hi\n");
  chmodSync(join(local, "script.sh"), 0o755);
  mkdirSync(join(local, "proj", "sub"), { recursive: true });
  writeFileSync(join(local, "proj", "a.txt"), "alpha");
  writeFileSync(join(local, "proj", "sub", "b.bin"), Buffer.from([0, 1, 2, 255]));
  chmodSync(join(local, "proj", "sub", "b.bin"), 0o600);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe("paddock cp LOCAL ID:PATH", () => {
  it("writes a file to a path that does not exist as that file, keeping its mode", async () => {
    expect(await cp(join(local, "script.sh"), r("new.sh"))).toEqual({ code: 0, stdout: "", stderr: "" });
    expect(statSync(onHost("new.sh")).isFile()).toBe(true);
    expect(readFileSync(onHost("new.sh"), "utf8")).toBe("#!/bin/sh\necho hi\n");
    expect(modeOf(onHost("new.sh"))).toBe(0o755);
  });

  it("puts a file into an existing directory under its own name, and overwrites an existing file", async () => {
    expect((await cp(join(local, "script.sh"), r("existing"))).code).toBe(0);
    expect(readFileSync(onHost("existing/script.sh"), "utf8")).toContain("echo hi");
    expect((await cp(join(local, "proj", "a.txt"), r("existing/file.txt"))).code).toBe(0);
    expect(readFileSync(onHost("existing/file.txt"), "utf8")).toBe("alpha");
  });

  it("refuses a file to a missing path ending in /, and to a path whose parent is missing", async () => {
    const slash = await cp(join(local, "script.sh"), r("missing/"));
    expect(slash).toMatchObject({ code: 1, stderr: expect.stringMatching(/not a directory/) as unknown });
    expect(existsSync(onHost("missing"))).toBe(false);
    const parent = await cp(join(local, "script.sh"), r("nope/deeper/x.sh"));
    expect(parent).toMatchObject({ code: 1, stderr: expect.stringMatching(/^error: not_found: .*no such directory/) as unknown });
    expect(existsSync(onHost("nope"))).toBe(false);
  });

  it("copies a directory recursively: made when missing, under its own name into an existing one, SRC/. as its contents", async () => {
    expect((await cp(join(local, "proj"), r("fresh"))).code).toBe(0);
    expect(tree(onHost("fresh"))).toEqual(["a.txt", "sub/", "sub/b.bin"]);
    expect(readFileSync(onHost("fresh/sub/b.bin"))).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(modeOf(onHost("fresh/sub/b.bin"))).toBe(0o600);
    expect((await cp(join(local, "proj"), r("existing"))).code).toBe(0);
    expect(tree(onHost("existing/proj"))).toEqual(["a.txt", "sub/", "sub/b.bin"]);
    expect((await cp(`${join(local, "proj")}/.`, r("existing/dir"))).code).toBe(0);
    expect(tree(onHost("existing/dir"))).toEqual(["a.txt", "sub/", "sub/b.bin"]);
  });

  it("refuses a directory onto a file", async () => {
    expect(await cp(join(local, "proj"), r("existing/file.txt"))).toMatchObject({ code: 1, stderr: expect.stringMatching(/cannot copy a directory onto a file/) as unknown });
  });

  it("extracts a tar on stdin (-) into an existing directory, plain or gzipped; a missing one is refused", async () => {
    const tar = execFileSync("tar", ["-c", "-C", local, "proj"]);
    expect((await cp("-", r("existing/dir"), tar)).code).toBe(0);
    expect(tree(onHost("existing/dir/proj"))).toEqual(["a.txt", "sub/", "sub/b.bin"]);
    const tgz = execFileSync("tar", ["-cz", "-C", local, "script.sh"]);
    expect((await cp("-", r("remote/sub"), tgz)).code).toBe(0);
    expect(modeOf(onHost("remote/sub/script.sh"))).toBe(0o755);
    expect((await cp("-", r("absent"), tar)).code).toBe(1);
  });
});

describe("paddock cp ID:PATH LOCAL", () => {
  it("writes a file to a path that does not exist as that file, with its mode, into an existing directory under its name", async () => {
    const out = mkdtempSync(join(tmpdir(), "paddock-cp-down-"));
    expect(await cp(r("remote/run.sh"), join(out, "got.sh"))).toEqual({ code: 0, stdout: "", stderr: "" });
    expect(readFileSync(join(out, "got.sh"), "utf8")).toBe("tool");
    expect(modeOf(join(out, "got.sh"))).toBe(0o750);
    expect((await cp(r("remote/run.sh"), out)).code).toBe(0);
    expect(readFileSync(join(out, "run.sh"), "utf8")).toBe("tool");
    expect((await cp(r("remote/run.sh"), join(out, "missing") + "/")).stderr).toMatch(/not a directory/);
    expect(existsSync(join(out, "missing"))).toBe(false);
    expect((await cp(r("remote/nothing"), out)).stderr).toMatch(/^error: not_found: .*no such file or directory/);
  });

  it("copies a directory: made when missing, under its own name into an existing one, SRC/. as its contents", async () => {
    const out = mkdtempSync(join(tmpdir(), "paddock-cp-down-"));
    expect((await cp(r("remote"), join(out, "made"))).code).toBe(0);
    expect(tree(join(out, "made"))).toEqual(["run.sh", "sub/", "sub/deep.txt", "sub/script.sh"]);
    expect(modeOf(join(out, "made", "run.sh"))).toBe(0o750);
    expect((await cp(r("remote"), out)).code).toBe(0);
    expect(tree(join(out, "remote"))).toEqual(["run.sh", "sub/", "sub/deep.txt", "sub/script.sh"]);
    mkdirSync(join(out, "into"));
    expect((await cp(r("remote/sub/."), join(out, "into"))).code).toBe(0);
    expect(tree(join(out, "into"))).toEqual(["deep.txt", "script.sh"]);
    writeFileSync(join(out, "plain"), "");
    expect((await cp(r("remote"), join(out, "plain"))).stderr).toMatch(/cannot copy a directory onto a file/);
  });

  it("writes a tar to stdout (-): a file or a directory under its own name, SRC/. as its contents", async () => {
    const tarOf = async (src: string) => {
      const run = startCli(["cp", r(src), "-"], cli);
      expect(await run.code).toBe(0);
      return run.stdout.bytes();
    };
    expect(tarList(await tarOf("remote/run.sh"))).toEqual(["run.sh"]);
    expect(tarList(await tarOf("remote")).filter((p) => !p.endsWith("/"))).toEqual(["remote/run.sh", "remote/sub/deep.txt", "remote/sub/script.sh"]);
    expect(tarList(await tarOf("remote/sub/.")).filter((p) => !p.endsWith("/"))).toEqual(["./deep.txt", "./script.sh"]);
  });
});

describe("paddock cp, bad usage", () => {
  it("exits 2 without asking the gateway", async () => {
    for (const [argv, reason] of [
      [["cp"], /expected SOURCE DESTINATION/],
      [["cp", "a", "b"], /neither side is ID:PATH/],
      [["cp", `${sessionId}:x`, `${sessionId}:y`], /both sides are sessions/],
      [["cp", `${sessionId}:../x`, "out"], /must not contain \.\./],
      [["cp", "a", `${sessionId}:/abs`], /must be relative/],
    ] as Array<[string[], RegExp]>) {
      await expectUsageError(argv, reason, cli);
    }
  });
});
