import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { natsServerBinary, repoRoot } from "@paddock/testing";

const confDir = join(repoRoot, "deploy", "nats");

it.each(readdirSync(confDir).filter((f) => f.endsWith(".conf")))("deploy/nats/%s is a valid nats-server config", (file) => {
  const r = spawnSync(natsServerBinary(), ["-c", join(confDir, file), "-t"], { encoding: "utf8" });
  expect(r.stdout + r.stderr).toContain("is valid");
  expect(r.status).toBe(0);
});
