/**
 * Exec through the real stack (issue 24 items 1, 2 and 5): POST
 * /v1/sessions/:id/exec buffered and streamed, stdin, cwd and env, the
 * output cap, base64 output, the timeout that kills the whole group, a
 * client that leaves mid-stream, background processes (list, cursor reads,
 * stdin, signals), authorization and the audit event per exec.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { seedMember, seedToken } from "@paddock/gateway/auth";
import { EXEC_OUTPUT_CAP_BYTES, type ExecFrame, type ExecResult } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api, stackClient, waitForAuditEvents } from "./helpers.ts";

const VIEWER_TOKEN = "tok_exec_viewer_0123456789ab";
let stack: Stack;
let nc: NatsConnection;
let sessionId: string;

const { createSession, outputOf } = stackClient(() => stack);

async function exec(body: unknown, token = stack.token): Promise<{ status: number; body: ExecResult & { error?: { code: string } } }> {
  const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as ExecResult & { error?: { code: string } } };
}

/** The NDJSON answer, line by line; onFrame may stop reading (abort) at any frame. */
async function execStream(body: unknown, onFrame?: (f: ExecFrame, abort: () => void) => void): Promise<ExecFrame[]> {
  const ac = new AbortController();
  const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, { method: "POST", signal: ac.signal, headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json", accept: "application/x-ndjson" }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/x-ndjson");
  const frames: ExecFrame[] = [];
  let rest = "";
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      rest += Buffer.from(chunk).toString("utf8");
      const lines = rest.split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) {
        const frame = JSON.parse(line) as ExecFrame;
        frames.push(frame);
        onFrame?.(frame, () => ac.abort());
      }
    }
  } catch (err) {
    if (!ac.signal.aborted) throw err;
  }
  return frames;
}

const joined = (frames: ExecFrame[], key: "stdout" | "stderr") => frames.map((f) => (key in f ? (f as Record<string, string>)[key] : "")).join("");

beforeAll(async () => {
  stack = await startStack();
  nc = await connect({ servers: stack.nats.url });
  await seedToken(nc, VIEWER_TOKEN, { workspaceId: "default", actor: { id: "vic", kind: "user" }, createdAt: 1 });
  await seedMember(nc, { workspaceId: "default", actorId: "vic", role: "member" });
  sessionId = (await createSession({ spec: { cmd: ["bash", "-c", "mkdir -p sub/dir; echo READY; exec sleep 600"] } })).id;
  await outputOf(sessionId, (t) => t.includes("READY"));
}, 120_000);

afterAll(async () => {
  await nc?.close();
  await stack?.stop();
});

describe("exec, buffered", () => {
  it("answers the exit code and stdout and stderr apart", async () => {
    const r = await exec({ cmd: ["sh", "-c", "echo out; echo err >&2; exit 3"] });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ exitCode: 3, signal: null, stdout: "out\n", stderr: "err\n", truncated: false, timedOut: false, encoding: "utf8" });
    expect(r.body.durationMs).toBeGreaterThanOrEqual(0);
  });

  it("feeds stdin, runs in cwd with env over the session's, as the session's user in its sandbox", async () => {
    const r = await exec({ cmd: ["sh", "-c", "cat; pwd; echo \"$GREETING\"; id -u; test -n \"$PADDOCK_URL\" && echo has-url"], stdin: "piped\n", cwd: "sub/dir", env: { GREETING: "hi" } });
    expect(r.status).toBe(200);
    const [piped, pwd, greeting, uid, url] = r.body.stdout.trim().split("\n");
    expect(piped).toBe("piped");
    expect(pwd?.endsWith("/sub/dir")).toBe(true);
    expect(greeting).toBe("hi");
    expect(Number(uid)).not.toBe(0);
    expect(url).toBe("has-url");
  });

  it("cuts output at the cap and says so", async () => {
    const r = await exec({ cmd: ["sh", "-c", `head -c ${EXEC_OUTPUT_CAP_BYTES + 5000} /dev/zero | tr '\\0' a`] });
    expect(r.body.exitCode).toBe(0);
    expect(r.body.stdout.length).toBe(EXEC_OUTPUT_CAP_BYTES);
    expect(r.body.truncated).toBe(true);
  });

  it("answers binary output as base64, and takes base64 stdin", async () => {
    const bytes = Buffer.from([0, 255, 1, 128, 10]);
    const r = await exec({ cmd: ["cat"], stdin: bytes.toString("base64"), encoding: "base64" });
    expect(Buffer.from(r.body.stdout, "base64").equals(bytes)).toBe(true);
  });

  it("kills the whole process group at the timeout and says so", async () => {
    const r = await exec({ cmd: ["sh", "-c", "sleep 300 & sleep 300; echo never"], timeoutMs: 300 });
    expect(r.body).toMatchObject({ exitCode: null, timedOut: true, stdout: "" });
    // A command that ignores SIGTERM (and passes the ignoring on to what it starts) is killed all the same.
    const stubborn = await exec({ cmd: ["sh", "-c", "trap '' TERM; sleep 3600 & while :; do sleep 1; done"], timeoutMs: 300 });
    expect(stubborn.body).toMatchObject({ exitCode: null, timedOut: true });
    expect(r.body.signal).toBe("SIGKILL");
    // Nothing of it is left: no sleep 300 in the session.
    const ps = await exec({ cmd: ["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"] });
    expect(ps.body.stdout.trim()).toBe("0");
  });

  it("refuses bad input with a clear error and runs nothing", async () => {
    for (const body of [{}, { cmd: [] }, { cmd: [""] }, { cmd: ["true"], cwd: "../x" }, { cmd: ["true"], cwd: "/etc" }, { cmd: ["a\0b"] }, { cmd: ["true"], env: { PADDOCK_TOKEN: "x" } }, { cmd: ["true"], timeoutMs: 0 }, { cmd: ["true"], extra: 1 }]) {
      const r = await exec(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error?.code).toBe("invalid");
    }
    expect((await exec({ cmd: ["true"], cwd: "missing" })).status).toBe(400);
    expect((await exec({ cmd: ["no-such-command-xyz"] })).body.error?.code).toBe("invalid");
    const unknown = await fetch(`${stack.url}/v1/sessions/nope/exec`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, body: JSON.stringify({ cmd: ["true"] }) });
    expect(unknown.status).toBe(404);
  });

  it("is refused to a member who did not create the session, who may list processes", async () => {
    expect((await exec({ cmd: ["true"] }, VIEWER_TOKEN)).status).toBe(403);
    expect((await api(stack.url, VIEWER_TOKEN, "GET", `/v1/sessions/${sessionId}/processes`)).status).toBe(200);
  });

  it("is one audit event per exec, with no command text", async () => {
    await exec({ cmd: ["echo", "secret-command-text"] });
    const events = await waitForAuditEvents(nc, "default", sessionId, (es) => es.some((e) => e.action === "exec"));
    const execEvents = events.filter((e) => e.action === "exec");
    expect(execEvents.length).toBeGreaterThan(0);
    expect(JSON.stringify(execEvents)).not.toContain("secret-command-text");
  });
});

describe("exec, streamed", () => {
  it("sends stdout and stderr lines as they happen, then the exit", async () => {
    const frames = await execStream({ cmd: ["sh", "-c", "echo one; echo two >&2; echo three; exit 7"] });
    expect(joined(frames, "stdout")).toBe("one\nthree\n");
    expect(joined(frames, "stderr")).toBe("two\n");
    expect(frames.at(-1)).toMatchObject({ exit: { exitCode: 7, timedOut: false } });
  });

  it("carries 20 MB through the credit window whole", async () => {
    const frames = await execStream({ cmd: ["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' b"] });
    expect(joined(frames, "stdout").length).toBe(20_000_000);
    expect(frames.at(-1)).toMatchObject({ exit: { exitCode: 0 } });
  });

  it("kills the command when the client leaves mid-stream", async () => {
    await execStream({ cmd: ["sh", "-c", "echo started; exec sleep 301"] }, (f, abort) => {
      if ("stdout" in f && f.stdout.includes("started")) abort();
    });
    // The kill is sent as the connection closes: wait on the process list, not the clock.
    for (;;) {
      const ps = await exec({ cmd: ["sh", "-c", "ps -eo args | grep -c '^sleep 301' || true"] });
      if (ps.body.stdout.trim() === "0") break;
    }
    const list = (await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes`)).body as { processes: Array<{ cmd: string[]; exit?: { signal: string | null } }> };
    const gone = list.processes.find((p) => p.cmd.join(" ").includes("sleep 301"));
    expect(gone?.exit?.signal).toBe("SIGKILL");
  });
});

describe("exec and a revoked token", () => {
  it("cuts the stream and kills the command when the token it was started with is revoked", async () => {
    const minted = await api(stack.url, stack.token, "POST", "/v1/tokens", { label: "exec-revoked" });
    expect(minted.status).toBe(201);
    const { id: tokenId, token } = minted.body as { id: string; token: string };
    const res = await fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/x-ndjson" },
      body: JSON.stringify({ cmd: ["sh", "-c", "echo started; exec sleep 304"] }),
    });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let seen = "";
    while (!seen.includes("started")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the stream ended before the command started");
      seen += Buffer.from(value).toString("utf8");
    }
    expect((await api(stack.url, stack.token, "DELETE", `/v1/tokens/${tokenId}`)).status).toBe(200);
    // Cut, never ended: the read fails (or ends) without an exit frame.
    let rest = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += Buffer.from(value).toString("utf8");
      }
    } catch {
      // the connection was destroyed
    }
    expect(rest).not.toContain('"exit"');
    for (;;) {
      const ps = await exec({ cmd: ["sh", "-c", "ps -eo args | grep -c '^sleep 304' || true"] });
      if (ps.body.stdout.trim() === "0") break;
    }
  });
});

describe("background processes", () => {
  it("start without waiting, take stdin, are read from a cursor exactly once, and take signals", async () => {
    const started = await fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, body: JSON.stringify({ cmd: ["sh", "-c", "while read l; do echo got:$l; done; echo eof; exec sleep 302"], background: true }) });
    expect(started.status).toBe(202);
    const { id } = (await started.json()) as { id: string };
    const stdin = (data: string, eof = false) => fetch(`${stack.url}/v1/sessions/${sessionId}/processes/${id}/stdin${eof ? "?eof=true" : ""}`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/octet-stream" }, body: data });
    expect((await stdin("a\n")).status).toBe(200);
    const read = async (since: string) => (await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes/${id}/output?since=${since}`)).body as { frames: ExecFrame[]; cursor: string; ended: boolean };
    let cursor = "0";
    let seen = "";
    while (!seen.includes("got:a")) {
      const r = await read(cursor);
      seen += joined(r.frames, "stdout");
      cursor = r.cursor;
    }
    await stdin("b\n", true);
    while (!seen.includes("eof")) {
      const r = await read(cursor);
      seen += joined(r.frames, "stdout");
      cursor = r.cursor;
    }
    // Each chunk once: nothing read twice across cursors.
    expect(seen).toBe("got:a\ngot:b\neof\n");
    const listed = (await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes`)).body as { processes: Array<{ id: string; background: boolean; exit?: unknown }> };
    expect(listed.processes.find((p) => p.id === id)).toMatchObject({ background: true });
    expect(listed.processes.find((p) => p.id === id)?.exit).toBeUndefined();
    const signal = await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/processes/${id}/signal`, { signal: "SIGTERM" });
    expect(signal.body).toEqual({ delivered: true });
    let ended = false;
    let exit: ExecFrame | undefined;
    while (!ended) {
      const r = await read(cursor);
      cursor = r.cursor;
      ended = r.ended;
      exit = r.frames.find((f) => "exit" in f) ?? exit;
    }
    expect(exit).toMatchObject({ exit: { exitCode: null, signal: "SIGTERM" } });
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/processes/${id}/signal`, { signal: "SIGKILL" })).body).toEqual({ delivered: false });
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/processes/unknown1/signal`, { signal: "SIGKILL" })).status).toBe(404);
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/processes/${id}/signal`, { signal: "SIGSEGV" })).status).toBe(400);
  });

  it("share one pid namespace with every exec of the session: a later exec sees a background process and can kill it", async () => {
    const started = await exec({ cmd: ["sh", "-c", "echo $$ > bg.pid; exec sleep 304"], background: true });
    expect(started.status).toBe(202);
    // Its pid file is there once a later exec can read it (each ask one exec: no clock).
    let pid = "";
    while (!/^\d+$/.test(pid)) pid = (await exec({ cmd: ["sh", "-c", "cat bg.pid 2>/dev/null || true"] })).body.stdout.trim();
    const ps = await exec({ cmd: ["ps", "-o", "pid=,args=", "-p", pid] });
    expect(ps.body.stdout.trim()).toMatch(new RegExp(`^${pid} +sleep 304$`));
    expect((await exec({ cmd: ["kill", "-KILL", pid] })).body.exitCode).toBe(0);
    const listed = async () => ((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes`)).body as { processes: Array<{ id: string; exit?: { signal: string | null } }> }).processes.find((p) => p.id === started.body.id);
    let entry = await listed();
    while (entry?.exit === undefined) entry = await listed();
    expect(entry.exit.signal).toBe("SIGKILL");
  });
});

describe("exec and a warm suspend", () => {
  it("wakes a warm-suspended session (wake on use), which kept its background processes; listing them wakes nothing", async () => {
    const started = await fetch(`${stack.url}/v1/sessions/${sessionId}/exec`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, body: JSON.stringify({ cmd: ["sh", "-c", "while :; do date +%s%N > ticks; sleep 0.05; done"], background: true }) });
    expect(started.status).toBe(202);
    const { id } = (await started.json()) as { id: string };
    const suspended = await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/suspend?wait=suspended_warm&timeoutMs=60000`, { warm: true });
    expect((suspended.body as { waited?: { outcome: string } }).waited?.outcome).toBe("reached");
    // Listing does not wake it: still warm-suspended, the background process listed, not ended.
    const listed = (await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}/processes`)).body as { processes: Array<{ id: string; exit?: unknown }> };
    expect(listed.processes.find((p) => p.id === id)?.exit).toBeUndefined();
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}`)).body as { state: string }).state).toBe("suspended_warm");
    // An exec wakes it (wake on use) and runs; the background process carries on where it stopped.
    const after = await exec({ cmd: ["cat", "ticks"] });
    expect(after.body.exitCode).toBe(0);
    expect(((await api(stack.url, stack.token, "GET", `/v1/sessions/${sessionId}`)).body as { state: string }).state).toBe("running");
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${sessionId}/processes/${id}/signal`, { signal: "SIGKILL" })).body).toEqual({ delivered: true });
  });
});

