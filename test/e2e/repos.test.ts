/**
 * A session's repositories through the real stack (issue 24 item 4): a
 * session created over HTTP with `repos` has them cloned (from git
 * http-backend on loopback, through the session's egress proxy) before its
 * command starts; `GET /v1/sessions/:id/repos` answers each one's path,
 * branch, head and whether it is dirty; a clone that fails fails the session
 * with git's words as its reason.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WorkspaceReposReply } from "@paddock/contracts";
import { makeSourceRepo, startGitHttpServer, startStack, type GitHttpServer, type SourceRepo, type Stack } from "@paddock/testing";
import { api, stackClient } from "./helpers.ts";

let stack: Stack;
let src: SourceRepo;
let git: GitHttpServer;

const { createSession, outputOf } = stackClient(() => stack);
const repos = (id: string) => api(stack.url, stack.token, "GET", `/v1/sessions/${id}/repos`);

beforeAll(async () => {
  src = makeSourceRepo();
  git = await startGitHttpServer(src.root);
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
  await git?.close();
});

describe("spec.repos and GET /v1/sessions/:id/repos", () => {
  it("clones before the command starts and reports branch, head and dirtiness", async () => {
    const url = `${git.url}/${src.name}.git`;
    const session = await createSession({
      spec: {
        cmd: ["sh", "-c", 'echo "first=$(cat project/README.md)."; echo READY; exec sleep 600'],
        egressAllow: ["127.0.0.1"],
        repos: [{ url }, { url, ref: "v1", path: "pinned/v1" }],
      },
    });
    expect(await outputOf(session.id, (t) => t.includes("READY"))).toContain("first=second.");
    const clean = await repos(session.id);
    expect(clean.status).toBe(200);
    const byPath = (reply: WorkspaceReposReply) => Object.fromEntries(reply.repos.map((r) => [r.path, r]));
    expect(byPath(clean.body as WorkspaceReposReply)).toEqual({
      project: { path: "project", branch: "main", head: src.commits.main, dirty: false },
      "pinned/v1": { path: "pinned/v1", branch: null, head: src.commits.first, dirty: false },
    });
    // A change through the files route makes it dirty.
    const put = await fetch(`${stack.url}/v1/sessions/${session.id}/files?path=project/README.md`, {
      method: "PUT",
      headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/octet-stream" },
      body: "edited\n",
    });
    expect(put.status).toBe(200);
    const dirty = await repos(session.id);
    expect(byPath(dirty.body as WorkspaceReposReply).project).toEqual({ path: "project", branch: "main", head: src.commits.main, dirty: true });
    expect((await repos("ses_nosuchsession0000000")).status).toBe(404);
  });

  it("a clone that fails fails the session with git's words", async () => {
    const session = await createSession({ spec: { cmd: ["true"], egressAllow: ["127.0.0.1"], repos: [{ url: `${git.url}/${src.name}.git`, ref: "no-such-branch" }] } });
    const record = (await api(stack.url, stack.token, "GET", `/v1/sessions/${session.id}?waitFor=failed&timeoutMs=60000`)).body as { state: string };
    expect(record.state).toBe("failed");
    expect(JSON.stringify(record)).toMatch(/repository project: git clone failed \(exit 128\): .*Remote branch no-such-branch not found/);
  });
});
