/**
 * PADDOCK_NATS_CREDS_FILE: services read their NATS user and password from a
 * 0600 file (what `npm run up` writes) instead of the environment.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { commonConfig, commonEnv, ConfigError, parseEnv } from "./index.ts";

const dir = mkdtempSync(join(tmpdir(), "paddock-creds-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const load = (env: Record<string, string>) => commonConfig(parseEnv(z.object(commonEnv), env));
function credsFile(name: string, text: string, mode = 0o600): string {
  const file = join(dir, name);
  writeFileSync(file, text, { mode });
  chmodSync(file, mode);
  return file;
}

describe("NATS credentials from a file", () => {
  it("reads user and password from a 0600 file", () => {
    const file = credsFile("ok.json", JSON.stringify({ user: "scheduler", password: "s3cret-pass" }));
    expect(load({ PADDOCK_NATS_CREDS_FILE: file })).toMatchObject({ natsUser: "scheduler", natsPass: "s3cret-pass" });
    expect(load({ PADDOCK_NATS_USER: "u", PADDOCK_NATS_PASS: "p" })).toMatchObject({ natsUser: "u", natsPass: "p" });
    expect(load({})).toMatchObject({ natsUser: undefined, natsPass: undefined });
  });

  it.each([
    ["a file others may read", () => credsFile("open.json", JSON.stringify({ user: "u", password: "topsecret" }), 0o644), /readable by others \(mode 644\)/],
    ["a file the group may read", () => credsFile("group.json", JSON.stringify({ user: "u", password: "topsecret" }), 0o640), /readable by others/],
    ["a missing file", () => join(dir, "absent.json"), /cannot read .*absent\.json \(ENOENT\)/],
    ["not JSON", () => credsFile("text.json", "user=u password=topsecret"), /is not \{"user","password"\} JSON/],
    ["JSON of another shape", () => credsFile("shape.json", JSON.stringify({ user: "u", pass: "topsecret" })), /is not \{"user","password"\} JSON/],
    ["an empty password", () => credsFile("empty.json", JSON.stringify({ user: "u", password: "" })), /is not \{"user","password"\} JSON/],
  ])("refuses %s with a ConfigError that does not quote the contents", (_name, make, message) => {
    const file = make();
    let caught: unknown;
    try {
      load({ PADDOCK_NATS_CREDS_FILE: file });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect(String(caught)).toMatch(message);
    expect(String(caught)).not.toContain("topsecret");
  });

  it("refuses a file together with PADDOCK_NATS_USER/PASS", () => {
    const file = credsFile("both.json", JSON.stringify({ user: "u", password: "p" }));
    expect(() => load({ PADDOCK_NATS_CREDS_FILE: file, PADDOCK_NATS_USER: "u" })).toThrow(/either it or PADDOCK_NATS_USER\/PASS/);
    expect(() => load({ PADDOCK_NATS_CREDS_FILE: file, PADDOCK_NATS_PASS: "p" })).toThrow(ConfigError);
    expect(() => load({ PADDOCK_NATS_CREDS_FILE: "" })).toThrow(ConfigError);
  });
});

describe("secret settings from files (<NAME>_FILE)", () => {
  const schema = z.object({ PADDOCK_SECRETS_KEY: z.string().optional(), PADDOCK_DEV_TOKEN: z.string().optional() });

  it("reads the value, trimmed, from a 0600 file; the variable itself still works", () => {
    const file = credsFile("key", "k3y-from-file\n");
    expect(parseEnv(schema, { PADDOCK_SECRETS_KEY_FILE: file })).toEqual({ PADDOCK_SECRETS_KEY: "k3y-from-file" });
    expect(parseEnv(schema, { PADDOCK_DEV_TOKEN: "direct" })).toEqual({ PADDOCK_DEV_TOKEN: "direct" });
  });

  it("refuses a file others may read, a missing file, and both spellings at once, without quoting the secret", () => {
    const open = credsFile("open-key", "topsecret", 0o644);
    expect(() => parseEnv(schema, { PADDOCK_SECRETS_KEY_FILE: open })).toThrow(/PADDOCK_SECRETS_KEY_FILE: .* is readable by others/);
    expect(() => parseEnv(schema, { PADDOCK_DEV_TOKEN_FILE: join(dir, "none") })).toThrow(/PADDOCK_DEV_TOKEN_FILE: cannot read .* \(ENOENT\)/);
    const file = credsFile("both-key", "topsecret");
    expect(() => parseEnv(schema, { PADDOCK_SECRETS_KEY_FILE: file, PADDOCK_SECRETS_KEY: "x" })).toThrow(/set either it or PADDOCK_SECRETS_KEY, not both/);
    try {
      parseEnv(schema, { PADDOCK_SECRETS_KEY_FILE: open });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      expect(String(err)).not.toContain("topsecret");
    }
  });
});

describe("an nkey seed instead of a password (joined runners)", () => {
  const seed = `SU${"A".repeat(56)}`;
  it("reads the seed from a 0600 file, keeping the user as the inbox name only", () => {
    const file = credsFile("runner.seed", `${seed}\n`);
    expect(load({ PADDOCK_NATS_NKEY_SEED_FILE: file, PADDOCK_NATS_USER: "runner-7-default-r1" })).toMatchObject({ natsUser: "runner-7-default-r1", natsPass: undefined, natsNkeySeed: seed });
    expect(() => load({ PADDOCK_NATS_NKEY_SEED_FILE: credsFile("open.seed", seed, 0o644) })).toThrow(/readable by others/);
  });

  it("refuses a malformed seed, and a seed together with a password", () => {
    expect(() => load({ PADDOCK_NATS_NKEY_SEED: "SAnot" })).toThrow(ConfigError);
    expect(() => load({ PADDOCK_NATS_NKEY_SEED: seed, PADDOCK_NATS_PASS: "p" })).toThrow(/not both/);
    expect(() => load({ PADDOCK_NATS_NKEY_SEED: seed, PADDOCK_NATS_CREDS_FILE: credsFile("both.json", JSON.stringify({ user: "u", password: "p" })) })).toThrow(/not both/);
  });
});
