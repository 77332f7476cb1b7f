import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { natsServerBinary, repoRoot } from "@paddock/testing";
import { isolatedExample, ISOLATED_EXAMPLE } from "../../scripts/gen-nats-conf.ts";

const confDir = join(repoRoot, "deploy", "nats");

it.each(readdirSync(confDir).filter((f) => f.endsWith(".conf")))("deploy/nats/%s is a valid nats-server config", (file) => {
  const r = spawnSync(natsServerBinary(), ["-c", join(confDir, file), "-t"], { encoding: "utf8" });
  expect(r.stdout + r.stderr).toContain("is valid");
  expect(r.status).toBe(0);
});

it("deploy/nats/isolated.conf.example is what natsAuthConfig renders (pnpm gen:nats-conf)", () => {
  expect(readFileSync(join(repoRoot, ISOLATED_EXAMPLE), "utf8")).toBe(isolatedExample());
});

it("deploy/nats/isolated.conf.example is a valid nats-server config once its passwords are set", () => {
  const env = Object.fromEntries(
    [...isolatedExample().matchAll(/password: \$([A-Z0-9_]+)/g)].map((m) => [m[1] ?? "", "example-password"]),
  );
  expect(Object.keys(env).length).toBeGreaterThanOrEqual(5);
  const r = spawnSync(natsServerBinary(), ["-c", join(repoRoot, ISOLATED_EXAMPLE), "-t"], { encoding: "utf8", env: { ...process.env, ...env } });
  expect(r.stdout + r.stderr).toContain("is valid");
});
