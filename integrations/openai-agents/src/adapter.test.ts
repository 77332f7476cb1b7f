/**
 * @paddock/openai-agents against a real stack (nats-server, scheduler,
 * recorder, gateway, runner) and the real OpenAI Agents SDK: the adapter
 * driven directly (create, exec, files, manifest, delete), a SandboxAgent run
 * through the framework's own run() with a scripted model whose tool calls
 * reach a Paddock session, and bad input answered with the framework's errors.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@paddock/testing";
import { Paddock } from "@paddock/sdk";
import { run, setTracingDisabled } from "@openai/agents";
import {
  Manifest,
  SandboxAgent,
  SandboxExecNonZeroError,
  SandboxExecTimeoutError,
  SandboxLifecycleError,
  SandboxPathResolutionError,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceReadNotFoundError,
  dir,
  file,
  gitRepo,
  localFile,
} from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, type RecordedModelCall } from "@openai/agents/testing";
import { PaddockSandboxClient, type PaddockSandboxSession } from "./index.ts";

let stack: Stack;
let pd: Paddock;
let client: PaddockSandboxClient;
let repoDir = "";

/** A one-commit bare repository on this host, cloned by the runner from its file:// URL. */
function makeRepo(): string {
  const git = (...args: string[]) => execFileSync("git", args, { cwd: repoDir, env: { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" } });
  git("init", "-q", "-b", "main", "src");
  execFileSync("sh", ["-c", "echo repo-content > src/hello.txt"], { cwd: repoDir });
  execFileSync("git", ["-C", "src", "add", "."], { cwd: repoDir });
  git("-C", "src", "commit", "-q", "-m", "one");
  git("clone", "-q", "--bare", "src", "repo.git");
  return `file://${join(repoDir, "repo.git")}`;
}

beforeAll(async () => {
  setTracingDisabled(true);
  repoDir = mkdtempSync(join(tmpdir(), "paddock-oa-repo-"));
  // The process backend: the runner clones the test's file:// repository as this user (a bwrap session's uid could not read it).
  stack = await startStack({ env: { "runner-agent": { PADDOCK_SANDBOX: "process" } } });
  pd = new Paddock({ baseUrl: stack.url, token: stack.token });
  client = new PaddockSandboxClient({ paddock: pd });
});
afterAll(async () => {
  await stack?.stop();
  if (repoDir) rmSync(repoDir, { recursive: true, force: true });
});

describe("PaddockSandboxClient driven directly", () => {
  let session: PaddockSandboxSession;

  it("creates a running Paddock session with the manifest's files, dirs and git repo materialised", async () => {
    const manifest = new Manifest({
      entries: {
        "README.md": file({ content: "hello paddock" }),
        data: dir({ children: { "a.txt": file({ content: new TextEncoder().encode("bytes A") }), nested: dir() } }),
        repo: gitRepo({ repo: makeRepo() }),
      },
      environment: { GREETING: "hi-from-manifest" },
    });
    session = await client.create({ manifest });
    expect((await pd.sessions.get(session.sessionId)).state).toBe("running");
    const root = session.state.manifest.root;
    expect(root.startsWith("/")).toBe(true);
    const r = await session.exec({ cmd: 'cat README.md; echo; cat data/a.txt; echo; cat repo/hello.txt; test -d data/nested && echo dir-ok; echo "$GREETING"; pwd' });
    expect(r.stdout).toBe(`hello paddock\nbytes A\nrepo-content\ndir-ok\nhi-from-manifest\n${root}\n`);
    expect(r.exitCode).toBe(0);
  });

  it("exec answers stdout, stderr and the exit code apart; a non-zero exit is an answer, not an error", async () => {
    const r = await session.exec({ cmd: "echo out; echo err >&2; exit 3", workdir: "data" });
    expect(r).toMatchObject({ stdout: "out\n", stderr: "err\n", exitCode: 3, output: "out\nerr\n" });
    const text = await session.execCommand({ cmd: "pwd", workdir: `${session.state.manifest.root}/data` });
    expect(text).toContain("Process exited with code 0");
    expect(text).toContain(`${session.state.manifest.root}/data`);
  });

  it("the adapter's own commands throw SandboxExecNonZeroError on failure", async () => {
    // mkdir under a file fails: the entry cannot be materialised.
    const err = await session.materializeEntry({ path: "README.md/sub", entry: dir() }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxExecNonZeroError);
    expect(err).toMatchObject({ code: "exec_nonzero" });
  });

  it("a command past its time limit is SandboxExecTimeoutError", async () => {
    session.state.commandTimeoutMs = 300;
    try {
      const err = await session.exec({ cmd: "echo started; sleep 30" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxExecTimeoutError);
      expect(err).toMatchObject({ code: "exec_timeout", details: { stdout: "started\n" } });
    } finally {
      delete session.state.commandTimeoutMs;
    }
  });

  it("writes, reads, lists, probes and removes files; edits through the apply_patch editor", async () => {
    await session.writeFile("notes/a.txt", "first");
    expect(new TextDecoder().decode(await session.readFile({ path: "notes/a.txt" }))).toBe("first");
    expect(new TextDecoder().decode(await session.readFile({ path: `${session.state.manifest.root}/notes/a.txt`, maxBytes: 3 }))).toBe("fir");
    expect(await session.listDir({ path: "notes" })).toEqual([{ name: "a.txt", path: `${session.state.manifest.root}/notes/a.txt`, type: "file" }]);
    expect((await session.listDir({ path: "" })).map((e) => `${e.name}:${e.type}`).sort()).toEqual(["README.md:file", "data:dir", "notes:dir", "repo:dir"]);
    expect(await session.pathExists("notes/a.txt")).toBe(true);
    expect(await session.directoryExists("notes/a.txt")).toBe(false);
    expect(await session.directoryExists("notes")).toBe(true);

    const editor = session.createEditor();
    await editor.createFile({ type: "create_file", path: "notes/b.txt", diff: "+line one\n+line two\n" });
    await editor.updateFile({ type: "update_file", path: "notes/b.txt", diff: "@@\n line one\n-line two\n+line 2\n" });
    // V4A diffs (the framework's applyDiff) leave no newline after the last line.
    expect(await session.readText("notes/b.txt")).toBe("line one\nline 2");

    await session.removeFile("notes/a.txt");
    expect(await session.pathExists("notes/a.txt")).toBe(false);
    await expect(session.readFile({ path: "notes/a.txt" })).rejects.toBeInstanceOf(SandboxWorkspaceReadNotFoundError);
  });

  it("delete deletes the Paddock session; the closed session refuses further calls", async () => {
    await session.delete();
    expect((await pd.sessions.get(session.sessionId)).state).toBe("destroyed");
    await expect(session.exec({ cmd: "true" })).rejects.toBeInstanceOf(SandboxLifecycleError);
  });
});

/** The text of the tool result answering `callId` in a model call's input. */
function toolOutput(call: RecordedModelCall, callId: string): string {
  const input = call.request.input;
  const item = (Array.isArray(input) ? input : []).find((i) => (i as { type?: string }).type === "function_call_result" && (i as { callId?: string }).callId === callId) as { output?: unknown } | undefined;
  const out = item?.output;
  if (typeof out === "string") return out;
  return (out as { text?: string } | undefined)?.text ?? JSON.stringify(out);
}

describe("a SandboxAgent run through the framework", () => {
  it("the model's shell and apply_patch tool calls reach a Paddock session, and the answer comes from their output", async () => {
    const model = new ScriptedModel([
      // The framework's hosted apply_patch tool (what it gives a Responses-style model), backed by the adapter's editor.
      [{ type: "apply_patch_call", callId: "call_patch", status: "completed", operation: { type: "create_file", path: "answer.txt", diff: "+forty-two\n" } }],
      [functionCall("exec_command", { cmd: 'cat notes.txt answer.txt; echo; echo "sid=$PADDOCK_SESSION_ID"' }, { callId: "call_exec" })],
      modelResponder((call) => {
        const output = toolOutput(call, "call_exec");
        return [assistantMessage(`The sandbox answered: ${output.slice(output.indexOf("Output:\n") + 8)}`)];
      }),
    ]);
    const agent = new SandboxAgent({
      name: "paddock-agent",
      instructions: "Answer from the workspace.",
      model,
      defaultManifest: new Manifest({ entries: { "notes.txt": file({ content: "paddock-was-here\n" }) } }),
    });
    const result = await run(agent, "What do notes.txt and answer.txt say?", { sandbox: { client } });
    model.assertComplete();
    expect(result.finalOutput).toContain("The sandbox answered: paddock-was-here\nforty-two\nsid=");
    const sid = /sid=(\S+)/.exec(String(result.finalOutput))?.[1] ?? "";
    expect(sid).toMatch(/\S/);
    // The run owned its sandbox: the Paddock session it ran in was deleted at the run's end.
    expect((await pd.sessions.get(sid)).state).toBe("destroyed");
  });
});

describe("bad input gives the framework's errors", () => {
  it("paths escaping the workspace, unknown sessions, unsupported entries and options", async () => {
    const session = await client.create({ manifest: new Manifest() });
    try {
      for (const path of ["../x", "a/../../x", "/etc/passwd"]) {
        await expect(session.readFile({ path }), path).rejects.toBeInstanceOf(SandboxPathResolutionError);
      }
      await expect(session.exec({ cmd: "true", workdir: "../.." })).rejects.toBeInstanceOf(SandboxPathResolutionError);
      await expect(session.exec({ cmd: "true", tty: true })).rejects.toBeInstanceOf(SandboxUnsupportedFeatureError);
      await expect(session.exec({ cmd: "true", runAs: "root" })).rejects.toBeInstanceOf(SandboxUnsupportedFeatureError);
      await expect(session.resolveExposedPort(8080)).rejects.toMatchObject({ code: "exposed_port_unavailable" });
    } finally {
      await session.delete();
    }
    const unknown = { ...session.state, sessionId: "ses_nosuchsession" };
    await expect(client.resume(unknown)).rejects.toBeInstanceOf(SandboxLifecycleError);
    await expect(client.delete(unknown)).rejects.toBeInstanceOf(SandboxLifecycleError);

    const before = await countSessions();
    await expect(client.create({ manifest: new Manifest({ entries: { x: localFile({ src: "/etc/hostname" }) } }) })).rejects.toBeInstanceOf(SandboxUnsupportedFeatureError);
    await expect(client.create({ manifest: new Manifest({ entries: { r: gitRepo({ repo: "o/n", subpath: "docs" }) } }) })).rejects.toBeInstanceOf(SandboxUnsupportedFeatureError);
    // Refused before anything was created.
    expect(await countSessions()).toBe(before);
  });
});

async function countSessions(): Promise<number> {
  let n = 0;
  for await (const _ of pd.sessions.list({ includeTerminal: true })) n++;
  return n;
}
