/**
 * A bwrap runner-agent of its own user (decision 0043's recipe, issue 23
 * item 5), started as a real service under `setpriv` with only the
 * capabilities the decision lists, as ambient ones (what systemd's
 * `User=paddock` + `AmbientCapabilities=` gives it): it registers with
 * `sandbox:bwrap`, its sessions run as uids of their own (never its own) with
 * no capabilities, their workspace survives a cold suspend and resume (the
 * checkpoint read and the restore written for the session's uid by a runner
 * that is not root), and a destroy leaves nothing of the session.
 */
import { chownSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startStack, untilSession, type ServiceProcess, type Stack } from "@paddock/testing";
import { pidsOfUid } from "../../services/runner-agent/src/sandbox/bwrap/uid-allocator.ts";
import { untraversableAncestor } from "../../services/runner-agent/src/sandbox-choice.ts";
import { runCli } from "../../cli/src/testing/run-cli.ts";
import { api, sessionOf, stackClient } from "./helpers.ts";

/** The runner's own user: no passwd entry needed, as for a dedicated system user. */
const RUNNER_UID = 46_000 + (process.pid % 1_000);
/** Sessions' uids: clear of the other suites' ranges (runner-agent tests 150,000–230,000; sandbox-bwrap 300,000–364,000). */
const UID_FIRST = 400_000 + (process.pid % 1_000) * 64;
/** Decision 0043, part 2: what a bwrap runner needs, and nothing else. */
const CAPABILITIES = ["setuid", "setgid", "sys_admin", "net_admin", "chown", "fowner", "dac_override", "kill"];
const HELD = CAPABILITIES.map((c) => `+${c}`).join(",");

let stack: Stack;
let nc: NatsConnection;
let runner: ServiceProcess;

beforeAll(async () => {
  stack = await startStack({ runners: 0 });
  nc = await connect({ servers: stack.nats.url });
  // Its data dir is its own (made by the deployment, e.g. systemd StateDirectory=).
  const dataDir = join(stack.dataDir, "runner-nr");
  mkdirSync(dataDir, { mode: 0o700 });
  chownSync(dataDir, RUNNER_UID, RUNNER_UID);
  runner = await stack.addRunner({
    runnerId: "runner-nr",
    env: { PADDOCK_SANDBOX: "bwrap", PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST), PADDOCK_SANDBOX_UID_COUNT: "32" },
    wrap: ["setpriv", `--reuid=${RUNNER_UID}`, `--regid=${RUNNER_UID}`, "--clear-groups", `--inh-caps=-all,${HELD}`, `--ambient-caps=-all,${HELD}`, `--bounding-set=-all,${HELD}`, "--"],
  });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const { post, createSession, outputOf } = stackClient(() => stack);

const natsPort = () => new URL(stack.nats.url.replace("nats://", "http://")).port;

/** A /proc/<pid>/status field. */
function statusOf(pid: number, field: string): string {
  return new RegExp(`^${field}:\\s+(.*)$`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? "";
}

/** The capability names of a CapEff-style mask (the bit numbers of linux/capability.h). */
function capabilityNames(mask: string): string[] {
  const bits: Record<number, string> = { 0: "chown", 1: "dac_override", 3: "fowner", 5: "kill", 6: "setgid", 7: "setuid", 12: "net_admin", 21: "sys_admin" };
  const value = BigInt(`0x${mask}`);
  const names: string[] = [];
  for (let bit = 0; bit < 64; bit++) if ((value >> BigInt(bit)) & 1n) names.push(bits[bit] ?? `bit${bit}`);
  return names.sort();
}

/** The runner's user reads the repository it runs from: a checkout below a directory others cannot pass (e.g. /root) cannot host it. */
const unreadableFrom = untraversableAncestor(join(import.meta.dirname, "x"));

describe.skipIf(unreadableFrom !== undefined)(`a bwrap runner of its own user${unreadableFrom ? ` (skipped: ${unreadableFrom} is not passable by other users)` : ""}`, () => {
  it("runs as that user with only the capabilities it needs, and registers with sandbox:bwrap", async () => {
    const pid = runner.process.pid!;
    expect(statusOf(pid, "Uid").split(/\s+/)).toEqual(Array(4).fill(String(RUNNER_UID)));
    expect(capabilityNames(statusOf(pid, "CapEff"))).toEqual([...CAPABILITIES].sort());
    expect(capabilityNames(statusOf(pid, "CapBnd"))).toEqual([...CAPABILITIES].sort());
    const runners = (await api(stack.url, stack.token, "GET", "/v1/runners")).body as { runners: Array<{ id: string; capabilities: string[] }> };
    expect(runners.runners.find((r) => r.id === "runner-nr")?.capabilities).toContain("sandbox:bwrap");
  });

  it("runs sessions as uids of their own with no capabilities, keeps their workspace across a cold suspend, and leaves nothing", async () => {
    const script = [
      'echo "uid=$(id -u)."',
      "grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status | tr -s '\\t' ' '",
      // Its own network, built by a runner that is not root: the gateway at PADDOCK_URL, and no NATS.
      'echo "GATEWAY:$(curl -s -o /dev/null -w %{http_code} -H "authorization: Bearer $PADDOCK_TOKEN" "$PADDOCK_URL/v1/sessions/$PADDOCK_SESSION_ID")."',
      `if timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/${natsPort()}" 2>/dev/null; then echo NATS:reached; else echo NATS:refused; fi`,
      'if [ -f state ]; then echo "restored:$(cat state):$(cat sub/file)."; else echo first > state; mkdir -p sub && echo nested > sub/file; echo wrote.; fi',
      "echo DONE.",
      "exec sleep 600",
    ].join("\n");
    const s = await createSession({ spec: { cmd: ["bash", "-c", script] } });
    const out = await outputOf(s.id, (t) => t.includes("DONE."));
    const uid = Number(/uid=(\d+)\./.exec(out)?.[1]);
    expect(uid).toBeGreaterThanOrEqual(UID_FIRST);
    expect(uid).toBeLessThan(UID_FIRST + 32);
    expect(out).toContain("wrote.");
    for (const cap of ["CapInh", "CapPrm", "CapEff", "CapAmb"]) expect(out).toContain(`${cap}: 0000000000000000`);
    expect(out).toContain("GATEWAY:200.");
    expect(out).toContain("NATS:refused");

    // The checkpoint is read from, and the restore written for, the session's uid by a runner that is not root.
    expect((await post(`/v1/sessions/${s.id}/suspend`, { warm: false })).status).toBe(200);
    expect(pidsOfUid(uid, { live: true })).toEqual([]);
    const resumed = sessionOf(await post(`/v1/sessions/${s.id}/resume`, {}));
    expect(resumed).toMatchObject({ state: "running", runnerId: "runner-nr" });
    const again = await outputOf(s.id, (t) => t.includes("restored:first:nested."));
    const uidAgain = Number([...again.matchAll(/uid=(\d+)\./g)].at(-1)?.[1]);
    expect(uidAgain).toBeGreaterThanOrEqual(UID_FIRST);
    expect(uidAgain).not.toBe(RUNNER_UID);

    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
    // The runner's destroyed fact (with the placement's usage) comes after its teardown.
    await untilSession(nc, s.id, (x) => x.state === "destroyed" && x.usageGeneration === resumed.placementGeneration);
    expect(pidsOfUid(uidAgain, { live: true })).toEqual([]);
    expect(runner.process.exitCode).toBeNull();
  });

  it("pushes, pulls and diffs the workspace for the session: what it pushes is the session's, what it reads is what the session wrote", async () => {
    const git = "git -c user.email=t@example.com -c user.name=t";
    const script = [
      `set -e; git init -q repo; cd repo; printf 'one\\n' > f.txt; git add f.txt; ${git} commit -q -m init; printf 'two\\n' >> f.txt; cd ..`,
      "echo READY",
      'until [ -f up/pushed.txt ]; do sleep 0.05; done; echo "owner:$(stat -c %u up/pushed.txt):$(id -u)."; echo edited >> up/pushed.txt; echo EDITED',
      "exec sleep 600",
    ].join("\n");
    const s = await createSession({ spec: { cmd: ["bash", "-c", script] } });
    await outputOf(s.id, (t) => t.includes("READY"));
    const scratch = mkdtempSync(join(tmpdir(), "paddock-nonroot-"));
    const cli = { PADDOCK_URL: stack.url, PADDOCK_TOKEN: stack.token };
    mkdirSync(join(scratch, "src"));
    writeFileSync(join(scratch, "src", "pushed.txt"), "from the laptop\n");
    expect(await runCli(["cp", join(scratch, "src"), `${s.id}:up`], cli)).toMatchObject({ code: 0, stderr: "" });
    const out = await outputOf(s.id, (t) => t.includes("EDITED"));
    const [, owner, self] = /owner:(\d+):(\d+)\./.exec(out) ?? [];
    expect(owner).toBe(self);
    expect(await runCli(["cp", `${s.id}:up`, join(scratch, "dst")], cli)).toMatchObject({ code: 0, stderr: "" });
    expect(readFileSync(join(scratch, "dst", "pushed.txt"), "utf8")).toBe("from the laptop\nedited\n");
    const diff = await runCli(["diff", s.id], cli);
    expect(diff.code).toBe(0);
    expect(diff.stdout).toContain("+two");
    expect((await api(stack.url, stack.token, "DELETE", `/v1/sessions/${s.id}`)).status).toBeLessThan(300);
  });
});
