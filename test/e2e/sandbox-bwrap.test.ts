/**
 * The bwrap sandbox backend through the real stack (issue 23): one runner on
 * PADDOCK_SANDBOX=bwrap reports `sandbox:bwrap`, and a session on it runs as
 * a uid of its own, sees nothing of the runner's data dir, reaches no NATS,
 * reaches the gateway at its PADDOCK_URL with its own token, survives a cold
 * suspend with its workspace, and leaves no process of its uid when destroyed.
 * An environment requiring `sandbox:bwrap` is placed only on such a runner.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, untilSession, type Stack } from "@paddock/testing";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { CgroupKind, probeCgroup } from "../../services/runner-agent/src/sandbox/bwrap/cgroup-probe.ts";
import { pidsOfUid } from "../../services/runner-agent/src/sandbox/bwrap/uid-allocator.ts";
import { api, sessionOf, stackClient } from "./helpers.ts";

// Clear of the ranges the runner-agent tests use (testHostIds: 150,000-230,000) and of the default (200,000).
const UID_FIRST = 300_000 + (process.pid % 1_000) * 64;
/** A second bwrap runner on this host (a cold resume moves there): its own uids, names and addresses. */
const SECOND_BWRAP = {
  PADDOCK_SANDBOX: "bwrap",
  PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST + 32),
  PADDOCK_SANDBOX_UID_COUNT: "32",
};
let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  stack = await startStack({
    env: {
      "runner-agent": {
        PADDOCK_SANDBOX: "bwrap",
        PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST),
        PADDOCK_SANDBOX_UID_COUNT: "32",
      },
    },
  });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { post, getSession, createSession, outputOf } = stackClient(() => stack);



/** What the session checks from inside, one line each, then it keeps running. */
function probeScript(dataDir: string, natsPort: string): string {
  return [
    'echo "uid=$(id -u)."',
    `if ls ${dataDir} >/dev/null 2>&1 || cat ${dataDir}/runner-1/generation >/dev/null 2>&1; then echo DATA:readable; else echo DATA:hidden; fi`,
    'H=${PADDOCK_URL#http://}; H=${H%%:*}',
    `for h in 127.0.0.1 $H; do if timeout 5 bash -c "exec 3<>/dev/tcp/$h/${natsPort}" 2>/dev/null; then echo NATS:reached; else echo NATS:refused; fi; done`,
    'echo "GATEWAY:$(curl -s -o /dev/null -w %{http_code} -H "authorization: Bearer $PADDOCK_TOKEN" "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID")."',
    'if [ -f state ]; then echo "restored:$(cat state)."; else echo first > state; echo wrote.; fi',
    "echo DONE.",
    "exec sleep 600",
  ].join("\n");
}

describe("a session on a bwrap runner", () => {
  it("reports sandbox:bwrap in its capabilities", async () => {
    const res = await api(stack.url, stack.token, "GET", "/v1/runners");
    const runners = (res.body as { runners: Array<{ id: string; capabilities: string[] }> }).runners;
    expect(runners.find((r) => r.id === "runner-1")?.capabilities).toContain("sandbox:bwrap");
    // What it holds each session to: rlimits everywhere, cgroups where the host offers them (writable v1 hierarchies on these VMs).
    expect(runners.find((r) => r.id === "runner-1")?.capabilities).toContain("limits:rlimit");
    expect(runners.find((r) => r.id === "runner-1")?.capabilities.includes("limits:cgroup")).toBe(probeCgroup().kind !== CgroupKind.none);
  });

  it("is contained, reaches its gateway, moves to another bwrap runner by a cold suspend with its workspace, and leaves nothing of its uid", async () => {
    const natsPort = new URL(stack.nats.url.replace("nats://", "http://")).port;
    const s = await createSession({ spec: { cmd: ["bash", "-c", probeScript(stack.dataDir, natsPort)] } });
    const out = await outputOf(s.id, (t) => t.includes("DONE."));
    const uid = Number(/uid=(\d+)\./.exec(out)?.[1]);
    expect(uid).toBeGreaterThanOrEqual(UID_FIRST);
    expect(uid).toBeLessThan(UID_FIRST + 32);
    const first = await getSession(s.id);
    expect(out).toContain("DATA:hidden");
    expect(out).not.toContain("NATS:reached");
    expect(out.match(/NATS:refused/g)).toHaveLength(2);
    expect(out).toContain("GATEWAY:200.");
    expect(out).toContain("wrote.");

    const suspended = sessionOf(await post(`/v1/sessions/${s.id}/suspend`, { warm: false }));
    expect(suspended.state).toBe("suspended_cold");
    expect(pidsOfUid(uid, { live: true })).toEqual([]);
    // A roomier bwrap runner: placement (most free capacity first) resumes the session there.
    await stack.addRunner({ runnerId: "runner-b2", capacity: 16, env: SECOND_BWRAP });
    const resumed = sessionOf(await post(`/v1/sessions/${s.id}/resume`, {}));
    expect(resumed).toMatchObject({ state: "running", runnerId: "runner-b2", placementGeneration: first.placementGeneration + 1 });
    // The new placement's output: the restored workspace, readable by the session's (new) uid, and its gateway again.
    const again = await outputOf(s.id, (t) => t.includes("restored:first."));
    expect(again).toContain("GATEWAY:200.");
    expect(again).toContain("DATA:hidden");
    const uidAgain = Number([...again.matchAll(/uid=(\d+)\./g)].at(-1)?.[1]);
    expect(uidAgain).toBeGreaterThanOrEqual(UID_FIRST + 32);
    expect(uidAgain).toBeLessThan(UID_FIRST + 64);

    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
    // The runner's destroyed fact (with the placement's usage) comes after its teardown.
    await untilSession(nc, s.id, (x) => x.state === "destroyed" && x.usageGeneration === resumed.placementGeneration);
    expect(pidsOfUid(uidAgain, { live: true })).toEqual([]);
  });

  it("an environment requiring sandbox:bwrap is placed on a bwrap runner, never on a process one", async () => {
    const processRunner = await stack.addRunner({ runnerId: "runner-process", capacity: 16, env: { PADDOCK_SANDBOX: "process" } });
    const runners = (await api(stack.url, stack.token, "GET", "/v1/runners")).body as { runners: Array<{ id: string; capabilities: string[] }> };
    expect(runners.runners.find((r) => r.id === "runner-process")?.capabilities).toContain("sandbox:process");
    const env = await post("/v1/environments", { name: "isolated", requirements: { capabilities: ["sandbox:bwrap"] } });
    expect(env.status).toBe(201);
    const envId = (env.body as { id: string }).id;
    // The process runner has the most free capacity, so anything unconstrained would land there.
    for (let i = 0; i < 3; i++) {
      const s = await createSession({ environmentId: envId, spec: { cmd: ["sleep", "600"] } });
      const placed = await untilSession(nc, s.id, (x) => x.state === "running");
      expect(["runner-1", "runner-b2"]).toContain(placed.runnerId);
    }
    const free = await createSession({ spec: { cmd: ["sleep", "600"] } });
    expect((await untilSession(nc, free.id, (x) => x.state === "running")).runnerId).toBe(String(processRunner.ready.runnerId));
    expect((await getSession(free.id)).state).toBe("running");
  });
});
