/**
 * The launch chain leaves a session no capability, whatever the runner held
 * (decision 0043, "found while testing"): started from a root process holding
 * inheritable and ambient capabilities, and from a runner of its own user
 * holding the capabilities it needs as ambient ones, the session's
 * /proc/self/status shows CapInh, CapPrm, CapEff and CapAmb all zero, over
 * the session's own network namespace (the nsenter path) and without one.
 */
import { execFile } from "node:child_process";
import { rmSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxLaunch, type SandboxSpec } from "./launch.ts";
import { createSandboxNetworks, type SandboxNetworks, type SessionNetwork } from "./network.ts";
import { probeBwrap, type BwrapCapability } from "./probe.ts";
import { singleSession, singleSessionSpec, testHostIds, TEST_PATH } from "./test-sandbox.ts";
import type { SessionIds } from "./uid-allocator.ts";

const run = promisify(execFile);
// Not the ids other test files take in the same worker process.
const ids = testHostIds(process.pid + 4_713);
let cap: BwrapCapability;
let dataDir: string;
let networks: SandboxNetworks;
let net: SessionNetwork;
let session: SessionIds;
/** A uid of the range no session gets: the runner's own user in the non-root case. */
const runnerUid = ids.firstUid + 14;

beforeAll(async () => {
  cap = await probeBwrap({ uid: ids.firstUid + 15, gid: ids.firstUid + 15, path: TEST_PATH });
  if (!cap.works || !cap.network.ip || !cap.network.nft) throw new Error(`bwrap or its networks do not work here: ${cap.reason ?? cap.network.reason ?? ""}`);
  ({ dataDir, session } = singleSession("paddock-caps-", ids.firstUid, "caps"));
  networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: ids.instance, prefix: ids.prefix });
  await networks.start();
  net = await networks.create(session.slot);
});
afterAll(async () => {
  await net?.destroy();
  await networks?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

function spec(netnsPath: string | undefined): SandboxSpec {
  // env empty: the emulated runner below (another uid than this test's process) could not open an environment file this process holds.
  return singleSessionSpec(dataDir, session, ["/usr/bin/grep", "-E", "^(Uid|Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):", "/proc/self/status"], { netnsPath });
}

/** Runs the session's launch under `setpriv …before` (the runner's credentials); answers the session's status lines. */
async function statusUnder(before: string[], netnsPath: string | undefined): Promise<Record<string, string>> {
  const launch = sandboxLaunch(spec(netnsPath), cap.tools!);
  const { stdout } = await run("setpriv", [...before, "--", launch.file, ...launch.args], { env: launch.env });
  return Object.fromEntries(stdout.trim().split("\n").map((l) => l.split(":\t").map((v) => v.trim()) as [string, string]));
}

const NONE = "0000000000000000";
const NO_CAPABILITIES = { CapInh: NONE, CapPrm: NONE, CapEff: NONE, CapAmb: NONE, NoNewPrivs: "1" };

describe("the launch chain's capabilities", () => {
  it.each([
    ["over its own network namespace", true],
    ["with a loopback-only network", false],
  ])("from a root runner holding inheritable and ambient capabilities: the session has none (%s)", async (_name, withNet) => {
    const held = "+net_raw,+net_admin,+sys_admin";
    // Precondition: the runner really holds them (setpriv --dump under the same options).
    const { stdout: dump } = await run("setpriv", [`--inh-caps=${held}`, `--ambient-caps=${held}`, "--", "setpriv", "--dump"]);
    expect(dump).toMatch(/Ambient capabilities: net_admin,net_raw,sys_admin/);
    const status = await statusUnder([`--inh-caps=${held}`, `--ambient-caps=${held}`], withNet ? net.netnsPath : undefined);
    expect(status).toMatchObject({ Uid: `${session.uid}\t${session.uid}\t${session.uid}\t${session.uid}`, ...NO_CAPABILITIES });
  });

  it.each([
    ["over its own network namespace", true],
    ["with a loopback-only network", false],
  ])("from a runner of its own user with the capabilities it needs as ambient ones: the session has none (%s)", async (_name, withNet) => {
    const needed = "+setuid,+setgid,+sys_admin";
    const asRunner = [`--reuid=${runnerUid}`, `--regid=${runnerUid}`, "--clear-groups", `--inh-caps=${needed}`, `--ambient-caps=${needed}`];
    const { stdout: dump } = await run("setpriv", [...asRunner, "--", "setpriv", "--dump"]);
    expect(dump).toContain(`uid: ${runnerUid}`);
    expect(dump).toMatch(/Ambient capabilities: setgid,setuid,sys_admin/);
    const status = await statusUnder(asRunner, withNet ? net.netnsPath : undefined);
    expect(status).toMatchObject({ Uid: `${session.uid}\t${session.uid}\t${session.uid}\t${session.uid}`, ...NO_CAPABILITIES });
  });
});
