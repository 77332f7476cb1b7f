import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CLAIMABLE_INSTANCES, NetInstanceError, resolveNetInstance } from "./net-instance.ts";

const claimDir = () => mkdtempSync(join(tmpdir(), "paddock-net-claims-"));

describe("a runner's network instance", () => {
  it("is the configured one when set, with 10.213 unless a prefix is configured too; nothing is claimed", () => {
    const dir = claimDir();
    expect(resolveNetInstance({ instance: "ab1" }, dir)).toMatchObject({ instance: "ab1", prefix: [10, 213] });
    expect(resolveNetInstance({ instance: "ab1", prefix: [10, 50] }, dir)).toMatchObject({ instance: "ab1", prefix: [10, 50] });
    expect(resolveNetInstance({}, dir)).toMatchObject({ instance: "h0", prefix: [10, 100] });
  });

  it("claims distinct instances and prefixes for runners of one host, and frees a released one for the next", () => {
    const dir = claimDir();
    const a = resolveNetInstance({}, dir);
    const b = resolveNetInstance({}, dir);
    expect([a.instance, b.instance]).toEqual(["h0", "h1"]);
    expect(a.prefix).not.toEqual(b.prefix);
    expect(readFileSync(join(dir, "0"), "utf8")).toBe(String(process.pid));
    a.release();
    expect(resolveNetInstance({}, dir).instance).toBe("h0");
    expect(resolveNetInstance({ prefix: [10, 9] }, dir)).toMatchObject({ instance: "h2", prefix: [10, 9] });
  });

  it("takes over the claim of a runner that died without releasing it", () => {
    const dir = claimDir();
    // A pid that cannot be alive (above the kernel's pid_max ceiling).
    writeFileSync(join(dir, "0"), String(2 ** 22 + 1));
    expect(resolveNetInstance({}, dir).instance).toBe("h0");
  });

  it("fails with a typed error, naming the setting, once every instance of the host is claimed", () => {
    const dir = claimDir();
    for (let i = 0; i < CLAIMABLE_INSTANCES; i++) resolveNetInstance({}, dir);
    expect(() => resolveNetInstance({}, dir)).toThrow(NetInstanceError);
    expect(() => resolveNetInstance({}, dir)).toThrow(/PADDOCK_SANDBOX_NET_INSTANCE/);
  });
});
