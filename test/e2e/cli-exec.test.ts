/**
 * `paddock exec` against the real stack (issue 24 item 6), a session on the
 * runner's default backend: the command's exit code as the CLI's (a signal
 * as 128+n, a timeout as 124), stdout and stderr to their own streams byte
 * for byte, -i stdin (in the body, and past its limit through a background
 * process), --cwd, --env, and usage errors that ask nothing of the gateway.
 */
import { createHash, randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_EXEC_STDIN_BYTES } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { main } from "../../cli/src/main.ts";
import { expectUsageError, runCli, Sink, startCli } from "../../cli/src/testing/run-cli.ts";
import { api, stackClient } from "./helpers.ts";

let stack: Stack;
let sessionId: string;
let cli: Record<string, string>;

const { createSession, outputOf } = stackClient(() => stack);
const exec = (args: string[], stdin?: string | Buffer) => runCli(["exec", ...args], cli, stdin);

beforeAll(async () => {
  stack = await startStack();
  cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
  sessionId = (await createSession({ spec: { cmd: ["bash", "-c", "mkdir -p sub/dir; echo READY; exec sleep 600"] } })).id;
  await outputOf(sessionId, (t) => t.includes("READY"));
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe("paddock exec", () => {
  it("passes the command's exit code through, and keeps stdout and stderr apart", async () => {
    expect(await exec([sessionId, "--", "true"])).toEqual({ code: 0, stdout: "", stderr: "" });
    expect(await exec([sessionId, "--", "sh", "-c", "echo out; echo err >&2; exit 3"])).toEqual({ code: 3, stdout: "out\n", stderr: "err\n" });
  });

  it("exits 128+n for a command killed by signal n, and 124 with a word on stderr at its timeout", async () => {
    expect((await exec([sessionId, "--", "sh", "-c", "kill -TERM $$"])).code).toBe(128 + 15);
    expect((await exec([sessionId, "--", "sh", "-c", "kill -KILL $$"])).code).toBe(128 + 9);
    const timedOut = await exec([sessionId, "--timeout-ms", "300", "--", "sh", "-c", "echo started; sleep 300"]);
    expect(timedOut).toMatchObject({ code: 124, stdout: "started\n" });
    expect(timedOut.stderr).toMatch(/ran past its timeout \(300 ms\) and was killed/);
  });

  it("writes binary output byte for byte", async () => {
    const run = startCli(["exec", sessionId, "--", "sh", "-c", "head -c 200000 /dev/urandom | tee bin.dat; sha256sum bin.dat >&2"], cli);
    expect(await run.code).toBe(0);
    const sha = createHash("sha256").update(run.stdout.bytes()).digest("hex");
    expect(run.stdout.bytes().length).toBe(200_000);
    expect(run.stderr.text().split(" ")[0]).toBe(sha);
  });

  it("pipes stdin with -i, and gives an empty stdin without it", async () => {
    const bytes = Buffer.from([0, 255, 1, 128, 10, 13]);
    const run = startCli(["exec", sessionId, "-i", "--", "cat"], cli);
    run.stdin.end(bytes);
    expect(await run.code).toBe(0);
    expect(run.stdout.bytes().equals(bytes)).toBe(true);
    // Without -i the CLI's stdin is never read: the command sees EOF at once.
    const run2 = startCli(["exec", sessionId, "--", "wc", "-c"], cli);
    expect(await run2.code).toBe(0);
    expect(run2.stdout.text().trim()).toBe("0");
  });

  it("sends stdin past the body's limit through a background process, in pieces, byte for byte", async () => {
    const big = randomBytes(MAX_EXEC_STDIN_BYTES * 2 + 12345);
    const r = await exec([sessionId, "-i", "--", "sh", "-c", "wc -c; echo done >&2; exit 5"], big);
    expect(r).toEqual({ code: 5, stdout: `${big.length}\n`, stderr: "done\n" });
    const sha = await exec([sessionId, "-i", "--", "sha256sum"], big);
    expect(sha.stdout.split(" ")[0]).toBe(createHash("sha256").update(big).digest("hex"));
    // A command that reads none of it still ends with its own code.
    expect(await exec([sessionId, "-i", "--", "sh", "-c", "exit 7"], big)).toMatchObject({ code: 7 });
  }, 60_000);

  it("runs in --cwd with --env over the session's environment", async () => {
    const r = await exec([sessionId, "--cwd", "sub/dir", "--env", "GREETING=hi there", "-e", "EMPTY=", "--", "sh", "-c", 'pwd; echo "$GREETING"; echo "[$EMPTY]"']);
    expect(r.code).toBe(0);
    const [pwd, greeting, empty] = r.stdout.trim().split("\n");
    expect(pwd?.endsWith("/sub/dir")).toBe(true);
    expect(greeting).toBe("hi there");
    expect(empty).toBe("[]");
  });

  it("ends the request on Ctrl-C (SIGINT) with 130, and the command is killed", async () => {
    const signals = new EventEmitter();
    const stdout = new Sink();
    const code = main(["exec", sessionId, "--", "sh", "-c", "echo started; exec sleep 300"], { stdin: new PassThrough(), stdout, stderr: new Sink(), env: cli, signals });
    await stdout.waitFor("started");
    signals.emit("SIGINT");
    expect(await code).toBe(130);
    // The gateway saw its client leave and killed the command: it is listed with its exit.
    const ended = async () => {
      const list = (await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes`)).body as { processes: Array<{ cmd: string[]; exit?: unknown }> };
      const mine = list.processes.filter((p) => p.cmd.includes("echo started; exec sleep 300"));
      return mine.length > 0 && mine.every((p) => p.exit !== undefined);
    };
    const deadline = Date.now() + 10_000;
    while (!(await ended()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await ended()).toBe(true);
  });

  it("reports what the gateway refuses with exit 125, apart from the command's own codes", async () => {
    const missing = await exec([sessionId, "--cwd", "no/such/dir", "--", "true"]);
    expect(missing.code).toBe(125);
    expect(missing.stderr).toMatch(/^error: invalid: /);
    expect((await exec([sessionId, "--", "no-such-command-xyz"])).code).toBe(125);
    expect(await exec(["nosuchsession", "--", "true"])).toMatchObject({ code: 125, stderr: expect.stringMatching(/^error: not_found: /) as unknown });
  });

  it("refuses bad invocations with exit 2 and a clear message", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["exec"], /expected ID -- CMD/],
      [["exec", sessionId], /put the command after --/],
      [["exec", sessionId, "ls", "-la"], /unknown flag -la|put the command after --/],
      [["exec", sessionId, "ls"], /put the command after --: paddock exec \S+ -- ls/],
      [["exec", sessionId, "--"], /expected a command after --/],
      [["exec", sessionId, "--env", "NOEQUALS", "--", "true"], /--env takes NAME=VALUE, got "NOEQUALS"/],
      [["exec", sessionId, "--env", "=x", "--", "true"], /--env takes NAME=VALUE/],
      [["exec", sessionId, "--env", "PADDOCK_TOKEN=x", "--", "true"], /--env \(PADDOCK_TOKEN\): PADDOCK_ variables are set by the runner/],
      [["exec", sessionId, "--env", "1BAD=x", "--", "true"], /--env \(1BAD\): variable names are/],
      [["exec", sessionId, "--timeout-ms", "soon", "--", "true"], /--timeout-ms must be a positive integer/],
      [["exec", sessionId, "--timeout-ms", "0", "--", "true"], /--timeout-ms must be a positive integer/],
      [["exec", sessionId, "--timeout-ms", "999999999", "--", "true"], /--timeout-ms: /],
      [["exec", sessionId, "--cwd", "../out", "--", "true"], /--cwd: must not contain \.\./],
      [["exec", sessionId, "--cwd", "/etc", "--", "true"], /--cwd: must be relative/],
      [["exec", sessionId, "--", ""], /the command: /],
      [["exec", sessionId, "--bogus", "--", "true"], /unknown flag --bogus/],
    ];
    for (const [argv, reason] of cases) await expectUsageError(argv, reason, cli);
  });

  it("prints its help", async () => {
    const r = await runCli(["exec", "--help"], cli);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage: paddock exec ID/);
    expect(r.stdout).toContain("128+N");
  });
});
