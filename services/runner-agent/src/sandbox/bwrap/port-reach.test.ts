/**
 * The runner reaches a session's ports at the session's end of its link
 * (network.ts, decision 0052): a server listening on the session's loopback
 * only is reached there too, and no other uid of the host can open a
 * connection into the session that way (its loopback stays the session's).
 * Real namespaces, a real veth pair, real nftables.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandboxNetworks, type SandboxNetworks, type SessionNetwork } from "./network.ts";
import { probeBwrap, type BwrapCapability } from "./probe.ts";
import { testHostIds, TEST_PATH } from "./test-sandbox.ts";

const run = promisify(execFile);
// Not the ids other test files take in the same worker process.
const ids = testHostIds(process.pid + 5_119);
const PORT = 8_765;
/** A uid of the range no session gets: another user of the host. */
const otherUid = ids.firstUid + 13;
let cap: BwrapCapability;
let networks: SandboxNetworks;
let net: SessionNetwork;
let server: ChildProcess;

/** Connects from this host as uid (this process's own when absent); answers what the server said, or the error's code. */
async function reach(host: string, uid?: number): Promise<string> {
  const script = `const s=require("node:net").connect(${PORT},${JSON.stringify(host)});let got="";s.on("data",(b)=>got+=b);s.on("end",()=>console.log(got));s.on("error",(e)=>console.log(e.code))`;
  const asUid = uid === undefined ? [] : ["setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--"];
  const [file, ...args] = [...asUid, process.execPath, "-e", script];
  const { stdout } = await run(file as string, args, { timeout: 10_000 });
  return stdout.trim();
}

beforeAll(async () => {
  cap = await probeBwrap({ uid: ids.firstUid + 15, gid: ids.firstUid + 15, path: TEST_PATH });
  if (!cap.works || !cap.network.ip || !cap.network.nft) throw new Error(`bwrap or its networks do not work here: ${cap.reason ?? cap.network.reason ?? ""}`);
  networks = createSandboxNetworks({ ip: cap.network.ip, nft: cap.network.nft, instance: ids.instance, prefix: ids.prefix, ownerUid: process.getuid?.() });
  await networks.start();
  net = await networks.create(3);
  // The session's server: on its loopback only, inside its namespace.
  server = spawn("nsenter", [`--net=${net.netnsPath}`, "--", process.execPath, "-e", `require("node:net").createServer((s)=>s.end("hello")).listen(${PORT},"127.0.0.1",()=>console.log("up"))`], { stdio: ["ignore", "pipe", "inherit"] });
  await once(server.stdout as NodeJS.ReadableStream, "data");
});
afterAll(async () => {
  server?.kill("SIGKILL");
  await net?.destroy();
  await networks?.stop();
});

describe("a session's ports, from the runner's side of its link", () => {
  it("reach a server listening on the session's loopback only, at the session's address", async () => {
    expect(await reach(net.sandboxAddress)).toBe("hello");
  });

  it("are closed to every other uid of the host", async () => {
    expect(await reach(net.sandboxAddress, otherUid)).toBe("ECONNREFUSED");
    // The same uid reaches a server of the host itself: only connections into sessions are refused.
    const hostServer = spawn(process.execPath, ["-e", `require("node:net").createServer((s)=>s.end("host")).listen(${PORT},"127.0.0.1",()=>console.log("up"))`], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      await once(hostServer.stdout as NodeJS.ReadableStream, "data");
      expect(await reach("127.0.0.1", otherUid)).toBe("host");
    } finally {
      hostServer.kill("SIGKILL");
    }
  });
});
