import { describe, expect, it } from "vitest";
import { ConfigError } from "@paddock/config";
import { loadConfig } from "./config.ts";

describe("scheduler config", () => {
  it("bounds the terminal log per app by bytes and age", () => {
    expect(loadConfig({ PADDOCK_TERM_MAX_BYTES_PER_APP: String(1024 * 1024), PADDOCK_TERM_MAX_AGE_MS: "60000" })).toMatchObject({
      termMaxMsgsPerApp: 4,
      termMaxAgeMs: 60_000,
    });
    expect(loadConfig({})).toMatchObject({ termMaxMsgsPerApp: 10_240, creatingTimeoutMs: 120_000, leaseTtlMs: 10_000, lostGraceMs: 20_000 });
    expect(() => loadConfig({ PADDOCK_TERM_MAX_BYTES_PER_APP: "100" })).toThrow(ConfigError);
    expect(() => loadConfig({ PADDOCK_TERM_MAX_AGE_MS: "-1" })).toThrow(ConfigError);
    expect(() => loadConfig({ PADDOCK_SESSION_TOKEN_SECRET: "short" })).toThrow(ConfigError);
  });

  it("bounds screen checkpoints in bytes; refuses a bound below 1 MiB or not a number", () => {
    expect(loadConfig({}).screensMaxBytes).toBe(1024 * 1024 * 1024);
    expect(loadConfig({ PADDOCK_SCREEN_MAX_BYTES: String(8 * 1024 * 1024) }).screensMaxBytes).toBe(8 * 1024 * 1024);
    for (const bad of ["1000", "-1", "lots", "1048576.5", ""]) expect(() => loadConfig({ PADDOCK_SCREEN_MAX_BYTES: bad })).toThrow(ConfigError);
  });

  it("checks outgoing messages only when asked, and refuses anything but true or false", () => {
    expect(loadConfig({}).validateOutgoing).toBe(false);
    expect(loadConfig({ PADDOCK_VALIDATE_OUTGOING: "true" }).validateOutgoing).toBe(true);
    expect(loadConfig({ PADDOCK_VALIDATE_OUTGOING: "false" }).validateOutgoing).toBe(false);
    for (const bad of ["yes", "1", "TRUE", ""]) expect(() => loadConfig({ PADDOCK_VALIDATE_OUTGOING: bad })).toThrow(ConfigError);
  });
});
