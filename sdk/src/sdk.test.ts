/**
 * @paddock/sdk against a real stack (nats-server, scheduler, recorder,
 * gateway, runner): sessions, exec (buffered and streamed), files, events
 * followed across a dropped connection, typed errors, a create retried
 * after its answer was lost that makes one session, not two, environments
 * listed, agents declared and parked, webhooks registered and delivered.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@paddock/testing";
import type { AuditEntry } from "@paddock/contracts";
import WebSocket from "ws";
import { NotFound, Paddock, Unauthenticated, Invalid, type SocketConstructor } from "./index.ts";

let stack: Stack;
let pd: Paddock;
let sessionId = "";

beforeAll(async () => {
  const webhooks = { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" };
  stack = await startStack({ env: { gateway: webhooks, "event-recorder": webhooks } });
  pd = new Paddock({ baseUrl: stack.url, token: stack.token });
});
afterAll(async () => {
  await stack?.stop();
});

const text = (b64: string) => Buffer.from(b64, "base64").toString("utf8");

describe("@paddock/sdk", () => {
  it("creates a session and waits for it to run; exec answers buffered and streamed", async () => {
    const s = await pd.sessions.create({ spec: { cmd: ["sh", "-c", "exec sleep 600"] }, name: "sdk-one" }, { wait: "running", timeoutMs: 30_000 });
    expect(s.waited).toEqual({ state: "running", outcome: "reached" });
    sessionId = s.id;
    const r = await pd.exec.run(sessionId, { cmd: ["sh", "-c", "echo out; echo err >&2; exit 3"] });
    expect(r).toMatchObject({ exitCode: 3, stdout: "out\n", stderr: "err\n", truncated: false });
    const frames = [];
    for await (const f of pd.exec.stream(sessionId, { cmd: ["sh", "-c", "echo one; echo two"] })) frames.push(f);
    const out = frames.flatMap((f) => ("stdout" in f && f.stdout !== undefined ? [f.stdout] : [])).join("");
    expect(out.includes("one") || text(out).includes("one")).toBe(true);
    expect(frames.at(-1)).toMatchObject({ exit: { exitCode: 0 } });
  });

  it("writes, reads, lists and removes files", async () => {
    await pd.files.write(sessionId, "notes/a.txt", "hello sdk");
    expect(new TextDecoder().decode(await pd.files.read(sessionId, "notes/a.txt"))).toBe("hello sdk");
    const listed = await pd.files.list(sessionId, "notes");
    expect(JSON.stringify(listed)).toContain("a.txt");
    await pd.files.remove(sessionId, "notes/a.txt");
    await expect(pd.files.read(sessionId, "notes/a.txt")).rejects.toBeInstanceOf(NotFound);
  });

  it("throws errors as classes by code, with the status", async () => {
    const missing = await pd.sessions.get("ses_nosuchsession").catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFound);
    expect(missing).toMatchObject({ code: "not_found", status: 404, retryable: false });
    const anonymous = new Paddock({ baseUrl: stack.url, token: "pdk_not_a_token" });
    await expect(anonymous.sessions.get(sessionId)).rejects.toBeInstanceOf(Unauthenticated);
    await expect(pd.exec.run(sessionId, { cmd: [] })).rejects.toBeInstanceOf(Invalid);
  });

  it("a create whose answer was lost is retried with its idempotency key: one session, not two", async () => {
    let lost = 0;
    const flaky = new Paddock({
      baseUrl: stack.url,
      token: stack.token,
      sleep: async () => undefined,
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        // The gateway did the create; the client never hears of it.
        if (init?.method === "POST" && String(input).endsWith("/v1/sessions") && lost++ === 0) throw new TypeError("fetch failed: connection reset");
        return res;
      },
    });
    const s = await flaky.sessions.create({ spec: { cmd: ["sh", "-c", "exec sleep 600"] }, name: "sdk-retried" });
    expect(lost).toBe(2);
    const named = [];
    for await (const x of pd.sessions.list()) if (x.name === "sdk-retried") named.push(x.id);
    expect(named).toEqual([s.id]);
  });

  it("follows events across a dropped connection from the last seq: nothing lost, nothing repeated", async () => {
    let cuts = 0;
    // The first followed stream is cut after its second line, as a proxy restart would.
    const cutting = new Paddock({
      baseUrl: stack.url,
      token: stack.token,
      sleep: async () => undefined,
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (!String(input).includes("follow=true") || cuts++ > 0 || !res.body) return res;
        let lines = 0;
        const cut = res.body.pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(chunk, ctl) {
              const newlines = chunk.filter((b) => b === 10).length;
              if (lines + newlines >= 2) {
                const at = chunk.findIndex((b, i) => b === 10 && chunk.subarray(0, i + 1).filter((x) => x === 10).length === 2 - lines);
                ctl.enqueue(chunk.subarray(0, at + 1));
                ctl.error(new TypeError("terminated"));
                return;
              }
              lines += newlines;
              ctl.enqueue(chunk);
            },
          }),
        );
        return new Response(cut, { status: res.status, headers: res.headers });
      },
    });
    const all = (await pd.events.list({ sessionId })).events;
    expect(all.length).toBeGreaterThan(3);
    const ctl = new AbortController();
    const seen: AuditEntry[] = [];
    for await (const e of cutting.events.follow({ sessionId, signal: ctl.signal })) {
      seen.push(e);
      if (seen.length === all.length) ctl.abort();
    }
    expect(cuts).toBe(2);
    expect(seen.map((e) => e.seq)).toEqual(all.map((e) => e.seq));
  });

  it("a terminal as an async iterator: typed input reaches the program, a dropped socket resumes from its cursor, the exit ends it", async () => {
    const s = await pd.sessions.create({ spec: { cmd: ["sh", "-c", "read line; echo got-$line; for i in 1 2 3 4 5; do echo tick-$i; sleep 0.2; done; exit 4"] } }, { wait: "running", timeoutMs: 30_000 });
    const term = await pd.terminal.attach(s.id, { mode: "controller", WebSocket: WebSocket as unknown as SocketConstructor, since: "all" });
    term.send("hello\n");
    let text = "";
    let dropped = false;
    const cursors: number[] = [];
    for await (const item of term) {
      if (item.type === "exit") {
        expect(item.code).toBe(4);
        continue;
      }
      if (item.type !== "output") continue;
      cursors.push(item.cursor);
      text += new TextDecoder().decode(item.bytes);
      if (!dropped && text.includes("tick-1")) {
        dropped = true;
        // The network drops (not a close the client asked for): the SDK reattaches from its cursor.
        (term as unknown as { ws: { terminate(): void } }).ws.terminate();
      }
    }
    expect(dropped).toBe(true);
    expect(text).toContain("got-hello");
    for (let i = 1; i <= 5; i++) expect(text.split(`tick-${i}`).length - 1, `tick-${i}`).toBe(1);
    expect(cursors).toEqual([...cursors].sort((a, b) => a - b));
    expect(new Set(cursors).size).toBe(cursors.length);
  });

  it("lists the session's agents", async () => {
    expect(await pd.agents.list(sessionId)).toEqual([]);
  });
  it("lists environments; declares, parks and resumes an agent; registers a webhook that is delivered, lists its deliveries, removes it", async () => {
    const env = await pd.environments.create({ name: "sdk-env" });
    const envs = [];
    for await (const e of pd.environments.list()) envs.push(e.id);
    expect(envs).toContain(env.id);

    // pid 1 of the session's exec namespace (its init): one process, named with its namespace.
    const pidNamespace = (await pd.exec.run(sessionId, { cmd: ["readlink", "/proc/self/ns/pid"] })).stdout.trim();
    const agent = await pd.agents.declare(sessionId, { pid: 1, pidNamespace, runtime: "sdk" });
    expect((await pd.agents.get(sessionId, agent.id)).runtime).toBe("sdk");
    expect((await pd.agents.park(sessionId, agent.id)).state).toBe("parked");
    const next = await pd.agents.resume(sessionId, agent.id, { pid: 1, pidNamespace });
    expect(next.predecessorId).toBe(agent.id);

    let delivered: (body: string) => void = () => undefined;
    const got = new Promise<string>((resolve) => (delivered = resolve));
    const receiver = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        res.end();
        if (body.includes('"environment.delete"')) delivered(body);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const hook = await pd.webhooks.create({ url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`, events: ["environment.*"] });
      expect(hook.secret).toMatch(/^whsec_/);
      expect((await pd.webhooks.list()).map((w) => w.id)).toContain(hook.id);
      await pd.environments.delete(env.id);
      expect(JSON.parse(await got)).toMatchObject({ type: "environment.delete", data: { resource: { id: env.id } } });
      expect(await pd.webhooks.delete(hook.id)).toMatchObject({ id: hook.id });
      await expect(pd.webhooks.deliveries(hook.id)).rejects.toBeInstanceOf(NotFound);
    } finally {
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });
});
