import { mkdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { removeLeftoverNamespaces, SandboxNetworkError } from "./network.ts";

const NETNS_DIR = "/run/netns";
const prefix = `pdk-lo${process.pid}-`;
const planted = () => join(NETNS_DIR, `${prefix}0`);

afterEach(() => rmSync(planted(), { force: true }));

/** A namespace file a previous runner left, as the listing sees it (a plain file: `ip` itself is stood in for). */
function plant(): void {
  mkdirSync(NETNS_DIR, { recursive: true });
  writeFileSync(planted(), "");
}

describe("removeLeftoverNamespaces", () => {
  it("is done when a namespace the batch failed on is gone (removed meanwhile by a previous runner still ending)", async () => {
    plant();
    const ip = async () => {
      rmSync(planted());
      throw new SandboxNetworkError(`ip -force -b -: Cannot remove namespace file "${planted()}": No such file or directory`);
    };
    await expect(removeLeftoverNamespaces(prefix, ip)).resolves.toBeUndefined();
  });

  it("fails when a namespace it was asked to remove is still there", async () => {
    plant();
    const ip = async () => {
      throw new SandboxNetworkError("ip -force -b -: Device or resource busy");
    };
    await expect(removeLeftoverNamespaces(prefix, ip)).rejects.toBeInstanceOf(SandboxNetworkError);
    expect(existsSync(planted())).toBe(true);
  });

  it("asks nothing when none is left", async () => {
    let asked = 0;
    await removeLeftoverNamespaces(prefix, async () => {
      asked += 1;
      return "";
    });
    expect(asked).toBe(0);
  });
});
