import { chmodSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "@paddock/logging";
import { chooseSandbox, PROCESS_SANDBOX, SandboxUnavailableError, untraversableAncestor } from "./sandbox-choice.ts";
import { CgroupKind, probeCgroup } from "./sandbox/bwrap/cgroup-probe.ts";
import { testHostIds, TEST_PATH } from "./sandbox/bwrap/test-sandbox.ts";

/** A logger whose lines are kept, parsed. */
function capturingLogger() {
  const lines: Array<{ level: number; msg: string }> = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line) as { level: number; msg: string });
      done();
    },
  });
  return { log: createLogger({ service: "runner-agent", destination }), lines };
}

const WARN = 40;
const ids = testHostIds();
const settings = (backend: "auto" | "bwrap" | "process") => ({ ...PROCESS_SANDBOX, backend, uidFirst: ids.firstUid, uidCount: 16, netInstance: ids.instance, netPrefix: ids.prefix });

describe("choosing the sandbox backend at start", () => {
  it("process: runs it, and warns loudly that sessions are not isolated", async () => {
    const { log, lines } = capturingLogger();
    const backend = await chooseSandbox(settings("process"), { log, childPath: TEST_PATH });
    expect(backend.kind).toBe("process");
    expect(lines.some((l) => l.level === WARN && l.msg.startsWith("SESSIONS ARE NOT ISOLATED"))).toBe(true);
  });

  it("bwrap: runs it where its probe succeeds, without that warning", async () => {
    const { log, lines } = capturingLogger();
    const backend = await chooseSandbox(settings("bwrap"), { log, childPath: TEST_PATH });
    expect(backend.kind).toBe("bwrap");
    expect(lines.some((l) => l.msg.startsWith("SESSIONS ARE NOT ISOLATED"))).toBe(false);
    // It says which limits it enforces, and which cgroups it uses for them (this host's, as the probe finds them).
    const host = probeCgroup();
    const started = lines.find((l) => l.msg === "sandbox: bwrap") as unknown as { enforced: string[]; cgroup: { kind: string; controllers: string[] }; limits: Record<string, number> };
    expect(started.enforced).toEqual(host.kind === CgroupKind.none ? ["limits:rlimit"] : ["limits:rlimit", "limits:cgroup"]);
    expect(started.cgroup).toMatchObject({ kind: host.kind, controllers: host.hierarchies.flatMap((h) => h.controllers) });
    expect("pidsMax" in started.limits).toBe(host.kind !== CgroupKind.none);
    await backend.stop();
  });

  it("bwrap where it does not work: refuses to start, with the probe's reason", async () => {
    const { log } = capturingLogger();
    // No bwrap, nsenter, prlimit… on this PATH.
    const refused = chooseSandbox(settings("bwrap"), { log, childPath: "/nonexistent" });
    await expect(refused).rejects.toThrow(SandboxUnavailableError);
    await expect(refused).rejects.toThrow(/bwrap does not work here: missing: bwrap/);
  });

  it("auto: bwrap where it works, else process with both warnings", async () => {
    expect((await chooseSandbox(settings("auto"), { log: capturingLogger().log, childPath: TEST_PATH })).kind).toBe("bwrap");
    const { log, lines } = capturingLogger();
    expect((await chooseSandbox(settings("auto"), { log, childPath: "/nonexistent" })).kind).toBe("process");
    expect(lines.filter((l) => l.level === WARN).map((l) => l.msg.slice(0, 26))).toEqual(["sandbox: bwrap does not wo", "SESSIONS ARE NOT ISOLATED:"]);
  });

  it("a data dir below a directory session uids cannot pass: bwrap refuses with the directory named and the fix, auto falls back", async () => {
    const parent = mkdtempSync(join(tmpdir(), "paddock-private-"));
    chmodSync(parent, 0o700);
    const dataDir = join(parent, "data");
    expect(untraversableAncestor(dataDir)).toBe(parent);
    const refused = chooseSandbox(settings("bwrap"), { log: capturingLogger().log, childPath: TEST_PATH, dataDir });
    await expect(refused).rejects.toThrow(SandboxUnavailableError);
    await expect(refused).rejects.toThrow(`session uids cannot pass ${parent}`);
    expect((await chooseSandbox(settings("auto"), { log: capturingLogger().log, childPath: TEST_PATH, dataDir })).kind).toBe("process");
    chmodSync(parent, 0o711);
    expect(untraversableAncestor(dataDir)).toBeUndefined();
    const backend = await chooseSandbox(settings("bwrap"), { log: capturingLogger().log, childPath: TEST_PATH, dataDir });
    expect(backend.kind).toBe("bwrap");
    await backend.stop();
  });
});
