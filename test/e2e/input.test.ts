/**
 * Terminal input through the real stack (gateway WebSocket → core NATS →
 * runner-agent process → PTY), with per-service NATS credentials: nothing is
 * dropped at any speed, and a paste into a program that does not read its
 * stdin holds nobody but itself.
 */
import { createHash, randomBytes } from "node:crypto";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@paddock/testing";
import { api, sessionOf, Terminal } from "./helpers.ts";

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ isolated: true });
});
afterAll(async () => {
  await stack?.stop();
});

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function create(script: string): Promise<string> {
  const created = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } });
  expect(created.status).toBe(201);
  return sessionOf(created).id;
}

describe("terminal input is never dropped", () => {
  it("2,000 frames of 10 bytes sent as fast as the client can, from the moment the session is created, all reach `head -c 20000`", async () => {
    // Lines of 10 bytes: the terminal may still be in canonical mode when the first ones arrive.
    const frames = Array.from({ length: 2000 }, (_, i) => Buffer.from(`${String(i).padStart(9, "0")}\n`));
    const sent = Buffer.concat(frames);
    const id = await create("stty raw -echo; head -c 20000 | sha256sum; exec sleep 600");
    const t = await Terminal.open(stack.url, stack.token, id, "mode=controller&since=all");
    for (const f of frames) t.ws.send(f, { binary: true });
    await t.until((x) => x.output().includes(sha256(sent)));
    expect(t.textFrames().filter((f) => f.type === "error")).toEqual([]);
    t.ws.close();
  });

  it("a 1 MiB paste into a program not reading stdin leaves the runner serving (health, other sessions); once it reads it gets every byte", async () => {
    const size = 1024 * 1024;
    // Not reading stdin until the test opens the fifo, which the session makes in its workspace (the test reaches it from the host).
    const pasted = await create(`stty raw -echo; mkfifo go; printf 'waiting\\n'; cat go > /dev/null; head -c ${size} | sha256sum; exec sleep 600`);
    const fifo = join(stack.dataDir, "runner-1", "sessions", pasted, "workspace", "go");
    const paste = await Terminal.open(stack.url, stack.token, pasted, "mode=controller&since=all");
    await paste.until((x) => x.output().includes("waiting"));
    const bytes = Buffer.from(randomBytes(size).toString("base64").slice(0, size));
    for (let at = 0; at < size; at += 16 * 1024) paste.ws.send(bytes.subarray(at, at + 16 * 1024), { binary: true });

    // The runner answers its health endpoint and echoes another session's keystrokes
    // while the paste waits (before the fix its event loop spun in a blocking write).
    const other = await create("exec cat");
    const echo = await Terminal.open(stack.url, stack.token, other, "mode=controller&since=all");
    for (const word of ["first", "second", "third"]) {
      echo.ws.send(Buffer.from(`${word}\n`), { binary: true });
      await echo.until((x) => x.output().includes(`${word}\r\n${word}\r\n`));
      const health = await fetch(`http://127.0.0.1:${String(stack.runners[0]?.ready.opsPort)}/healthz`);
      expect(health.status).toBe(200);
    }
    // Still not read: the hash cannot be there yet.
    expect(paste.output()).not.toContain(sha256(bytes));

    // Let it read: every byte arrives, in order.
    const writer = await open(fifo, "w");
    await writer.close();
    await paste.until((x) => x.output().includes(sha256(bytes)));
    expect(paste.textFrames().filter((f) => f.type === "error")).toEqual([]);
    paste.ws.close();
    echo.ws.close();
  });
});
