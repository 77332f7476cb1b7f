/**
 * Checkpoints cost what changed (issue 30 item 2, decision 0062), through
 * the whole stack: a snapshot stores the workspace, a cold suspend after one
 * file changed reads and stores only that file, the resume on the other
 * runner restores everything (chunks from both runners' streams), and the
 * checkpoint after it builds on what was restored. A session booted from its
 * environment's snapshot stores none of the setup's bytes again.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Buckets } from "@paddock/contracts";
import { startStack, type ServiceProcess, type Stack } from "@paddock/testing";
import { api, stackClient } from "./helpers.ts";

let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  stack = await startStack({ runners: 2 });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { getSession, createSession, outputOf } = stackClient(() => stack);

/** What the runner said of the manifest it stored for the n-th time (counting from 1). */
interface Stored {
  files: number;
  filesRead: number;
  chunksStored: number;
}
async function nthManifest(runner: ServiceProcess, n: number): Promise<Stored> {
  let seen = 0;
  const line = await runner.waitForLog((l) => l.msg === "checkpoint manifest stored" && ++seen === n);
  return line as unknown as Stored;
}
const manifestsOf = (runner: ServiceProcess) => runner.logs.filter((l) => l.msg === "checkpoint manifest stored").length;

function runnerNamed(id: string | undefined): ServiceProcess {
  const found = stack.runners.find((r) => r.ready.runnerId === id);
  if (!found) throw new Error(`no runner ${String(id)}`);
  return found;
}

async function exec(id: string, cmd: string): Promise<void> {
  const res = await api(stack.url, stack.token, "POST", `/v1/sessions/${id}/exec`, { cmd: ["sh", "-c", cmd] });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect((res.body as { exitCode: number }).exitCode).toBe(0);
}

describe("incremental checkpoints through the stack", () => {
  it("a cold suspend stores only the changed file; the resume elsewhere restores all; the next checkpoint builds on the restore", async () => {
    // Written once (the command runs again on resume). The pause before READY puts the files' last change well before
    // the snapshot's stat (a change within 20 ms of it is read again next time: incremental.ts), so the counts below are exact.
    const s = await createSession({ spec: { cmd: ["sh", "-c", "[ -f f1.bin ] || { for i in 1 2 3 4 5 6; do head -c 2000000 /dev/urandom > f$i.bin; done; sleep 0.1; }; echo READY; exec sleep 600"] } });
    await outputOf(s.id, (t) => t.includes("READY"));
    const first = runnerNamed((await getSession(s.id)).runnerId);
    const before = manifestsOf(first);
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/snapshot`)).status).toBe(200);
    expect(await nthManifest(first, before + 1)).toMatchObject({ files: 6, filesRead: 6, chunksStored: 12 });

    await exec(s.id, "head -c 2000000 /dev/urandom > f3.bin && sha256sum f*.bin > /tmp/sums");
    const sums = (await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/exec`, { cmd: ["cat", "/tmp/sums"] })).body as { stdout: string };
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/suspend`, { warm: false })).status).toBe(200);
    expect(await nthManifest(first, before + 2)).toMatchObject({ files: 6, filesRead: 1, chunksStored: 2 });

    expect((await api(stack.url, stack.token, "POST", `/v1/runners/${String(first.ready.runnerId)}/cordon`)).status).toBeLessThan(300);
    try {
      expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/resume`)).status).toBe(200);
      const moved = await getSession(s.id);
      expect(moved.runnerId).not.toBe(first.ready.runnerId);
      const again = (await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/exec`, { cmd: ["sha256sum", ...[1, 2, 3, 4, 5, 6].map((i) => `f${i}.bin`)] })).body as { stdout: string };
      expect(again.stdout.split("\n")).toEqual(sums.stdout.split("\n"));

      const second = runnerNamed(moved.runnerId);
      const seen = manifestsOf(second);
      expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/snapshot`)).status).toBe(200);
      expect(await nthManifest(second, seen + 1)).toMatchObject({ files: 6, filesRead: 0, chunksStored: 0 });
    } finally {
      await api(stack.url, stack.token, "POST", `/v1/runners/${String(first.ready.runnerId)}/uncordon`);
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
    }
  });

  it("a session booted from its environment's snapshot builds its first checkpoint on it: the setup's bytes are not stored again", async () => {
    const env = await api(stack.url, stack.token, "POST", "/v1/environments", { name: "inc-setup", setup: "head -c 3000000 /dev/urandom > deps.bin" });
    expect(env.status, JSON.stringify(env.body)).toBe(201);
    const environmentId = (env.body as { id: string }).id;
    // The first session runs setup and stores its snapshot; the second boots from it.
    const builder = await createSession({ environmentId, spec: { cmd: ["sh", "-c", "echo BUILT; exec sleep 600"] } });
    await outputOf(builder.id, (t) => t.includes("BUILT"));
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${builder.id}`);
    // The snapshot fact is applied to the environment's record: watched, not polled.
    const w = await (await new Kvm(nc).open(Buckets.environments)).watch({ key: `default.${environmentId}` });
    for await (const e of w) if (e.operation === "PUT" && e.json<{ snapshot?: unknown }>().snapshot) break;
    w.stop();
    const s = await createSession({ environmentId, spec: { cmd: ["sh", "-c", "test -s deps.bin && echo own > mine.txt && echo BOOTED; exec sleep 600"] } });
    await outputOf(s.id, (t) => t.includes("BOOTED"));
    const runner = runnerNamed((await getSession(s.id)).runnerId);
    const seen = manifestsOf(runner);
    expect((await api(stack.url, stack.token, "POST", `/v1/sessions/${s.id}/snapshot`)).status).toBe(200);
    // deps.bin (3 chunks) is the environment's: only mine.txt is read and stored.
    expect(await nthManifest(runner, seen + 1)).toMatchObject({ files: 2, filesRead: 1, chunksStored: 1 });
    await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`);
  });
});
