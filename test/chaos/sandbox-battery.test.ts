/**
 * The sandbox case's detector can fail: the escape battery run by real bash,
 * unsandboxed, as an unprivileged uid, reports as ESCAPED exactly what that
 * uid can reach (a world-readable dev token, another workspace, a listening
 * NATS port) and as HELD what it cannot (a 0600 file of root's, writes to /etc).
 */
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo, type Server } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { escapeBattery, escapedOf, heldOf } from "@paddock/testing";

const NOBODY = 65_534;
let dir: string;
let nats: Server;

beforeAll(async () => {
  dir = mkdtempSync("/var/lib/paddock-battery-");
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, "dev-token"), "leaked-dev-token", { mode: 0o644 });
  writeFileSync(join(dir, "secrets-key"), "kept-key", { mode: 0o600 });
  mkdirSync(join(dir, "other"), { mode: 0o755 });
  writeFileSync(join(dir, "other", "file"), "other-private", { mode: 0o644 });
  nats = createServer((c) => c.end());
  await new Promise<void>((resolve) => nats.listen(0, "127.0.0.1", resolve));
});
afterAll(() => {
  nats?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function runAsNobody(script: string): Promise<string> {
  const child = spawn("setpriv", [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", "bash", "-c", script], { cwd: "/", env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  return new Promise((resolve) => child.on("close", () => resolve(out)));
}

describe("the escape battery's detector", () => {
  it("reports what an unsandboxed process reaches as ESCAPED and what it cannot as HELD", async () => {
    const script = escapeBattery({
      dataDir: dir,
      runnerDataDir: join(dir, "runner"),
      other: { sessionId: "ses_other", workspace: join(dir, "other"), address: "127.0.0.1", port: 1 },
      servicePids: [],
      natsPort: (nats.address() as AddressInfo).port,
      hostAddresses: [],
      forkBomb: false,
    }).replace("exec sleep 600", "exit 0");
    const out = await runAsNobody(script);
    expect(out).toContain("BATTERY-DONE.");
    const escaped = escapedOf(out).map((e) => e.split(" ")[0]);
    expect(escaped).toEqual(expect.arrayContaining(["read-dev-token", "list-data-dir", "read-other-workspace", "list-other-workspace", "nats-127.0.0.1"]));
    expect(escapedOf(out).find((e) => e.startsWith("read-dev-token"))).toContain("leaked-dev-token");
    expect(heldOf(out)).toEqual(expect.arrayContaining(["read-secrets-key", "write-1", "write-2", "other-session-port"]));
    expect(escapedOf("HELD:a\r\nESCAPED:b got it\r\n")).toEqual(["b got it"]);
  });
});
