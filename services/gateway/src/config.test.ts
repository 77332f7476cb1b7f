import { describe, expect, it } from "vitest";
import { loadConfig } from "./config.ts";

const ISSUER = "https://id.example.com";

describe("single sign-on settings", () => {
  it("are off without an issuer, with defaults once one is set", () => {
    expect(loadConfig({}).oidc).toBeUndefined();
    expect(loadConfig({ PADDOCK_OIDC_ISSUER: ISSUER, PADDOCK_OIDC_CLIENT_ID: "web" }).oidc).toEqual({
      issuer: ISSUER,
      clientId: "web",
      clientSecret: undefined,
      cliClientId: undefined,
      actorClaim: "email",
      scopes: "openid email profile",
      tokenTtlMs: 12 * 60 * 60_000,
    });
  });

  it("take http only on loopback, a client, and scopes with openid", () => {
    expect(loadConfig({ PADDOCK_OIDC_ISSUER: "http://127.0.0.1:9000", PADDOCK_OIDC_CLI_CLIENT_ID: "cli" }).oidc?.cliClientId).toBe("cli");
    expect(() => loadConfig({ PADDOCK_OIDC_ISSUER: "http://id.example.com", PADDOCK_OIDC_CLIENT_ID: "web" })).toThrow(/http:\/\/ only on a loopback/);
    expect(() => loadConfig({ PADDOCK_OIDC_ISSUER: ISSUER })).toThrow(/PADDOCK_OIDC_CLIENT_ID \(console\), PADDOCK_OIDC_CLI_CLIENT_ID \(CLI\) or both/);
    expect(() => loadConfig({ PADDOCK_OIDC_ISSUER: ISSUER, PADDOCK_OIDC_CLI_CLIENT_ID: "cli", PADDOCK_OIDC_CLIENT_SECRET: "s" })).toThrow(/needs PADDOCK_OIDC_CLIENT_ID/);
    expect(() => loadConfig({ PADDOCK_OIDC_ISSUER: ISSUER, PADDOCK_OIDC_CLIENT_ID: "web", PADDOCK_OIDC_SCOPES: "email" })).toThrow(/must include openid/);
    expect(() => loadConfig({ PADDOCK_OIDC_ISSUER: ISSUER, PADDOCK_OIDC_CLIENT_ID: "web", PADDOCK_OIDC_ACTOR_CLAIM: "a b" })).toThrow(/PADDOCK_OIDC_ACTOR_CLAIM/);
  });

  it("a public URL has no query, fragment or trailing slash", () => {
    expect(loadConfig({ PADDOCK_PUBLIC_URL: "https://paddock.example.com/" }).publicUrl).toBe("https://paddock.example.com");
    expect(() => loadConfig({ PADDOCK_PUBLIC_URL: "https://paddock.example.com/?x=1" })).toThrow(/PADDOCK_PUBLIC_URL/);
  });
});

describe("runner join settings", () => {
  const issuer = `SA${"A".repeat(56)}`;
  it("are off without an issuer seed; with one the NATS URLs for runners default to the gateway's", () => {
    expect(loadConfig({}).runnerJoin).toBeUndefined();
    expect(loadConfig({ PADDOCK_AUTH_CALLOUT_ISSUER_SEED: issuer, PADDOCK_NATS_URL: "nats://a:4222" }).runnerJoin).toEqual({
      issuerSeed: issuer,
      systemSeed: undefined,
      natsUrls: ["nats://a:4222"],
      credentialsTtlMs: 3_600_000,
    });
    expect(loadConfig({ PADDOCK_AUTH_CALLOUT_ISSUER_SEED: issuer, PADDOCK_RUNNER_NATS_URLS: "nats://x:4222, nats://y:4222" }).runnerJoin?.natsUrls).toEqual(["nats://x:4222", "nats://y:4222"]);
  });

  it("refuse a user seed as the issuer, and a system seed without an issuer", () => {
    expect(() => loadConfig({ PADDOCK_AUTH_CALLOUT_ISSUER_SEED: `SU${"A".repeat(56)}` })).toThrow(/PADDOCK_AUTH_CALLOUT_ISSUER_SEED/);
    expect(() => loadConfig({ PADDOCK_NATS_SYSTEM_SEED: `SU${"A".repeat(56)}` })).toThrow(/needs PADDOCK_AUTH_CALLOUT_ISSUER_SEED/);
  });
});
