import { describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { createAccount, createUser, decode, type AuthorizationRequest, type User } from "@nats-io/jwt";
import { runnerPermissions, runnerUser, type RunnerIdentity } from "@paddock/contracts";
import { createLogger } from "@paddock/logging";
import { AuthCallout, CalloutRefusal } from "./callout.ts";
import type { JoinStore } from "./join-store.ts";

const issuer = createAccount();
const runnerKey = createUser();
const NOW = 1_800_000_000_000;
const identity: RunnerIdentity = { runnerId: "r1", poolId: "default", publicKey: runnerKey.getPublicKey(), joinedAt: 1 };
const peer: RunnerIdentity = { runnerId: "r2", poolId: "default", publicKey: createUser().getPublicKey(), joinedAt: 2 };

/** The store as the callout reads it: identities by key and by id, and every joined one. */
function storeOf(records: RunnerIdentity[]): JoinStore {
  return {
    identityOfKey: (k: string) => Promise.resolve(records.find((r) => r.publicKey === k)),
    identity: (id: string) => Promise.resolve(records.find((r) => r.runnerId === id)),
    all: () => Promise.resolve(records),
  } as unknown as JoinStore;
}

const callout = (records: RunnerIdentity[]) =>
  new AuthCallout({} as NatsConnection, storeOf(records), { issuerSeed: new TextDecoder().decode(issuer.getSeed()), credentialsTtlMs: 3_600_000, now: () => NOW, log: createLogger({ service: "test", level: "silent" }) });

/** A request as nats-server sends it for a client that signed `nonce` with `signer` (or sent what `opts` says). */
function request(opts: { nonce?: string; nkey?: string; sig?: string } = {}): AuthorizationRequest {
  const nonce = opts.nonce ?? "n0nce-from-server";
  const sig = opts.sig ?? Buffer.from(runnerKey.sign(new TextEncoder().encode(nonce))).toString("base64url");
  return {
    server_id: { name: "s", host: "h", id: "NSERVER" },
    user_nkey: createUser().getPublicKey(),
    client_info: { nonce, host: "10.0.0.9" },
    connect_opts: { protocol: 1, nkey: opts.nkey ?? runnerKey.getPublicKey(), sig },
  };
}

describe("the auth callout's decision", () => {
  it("admits a joined runner that signed the nonce: its name, exactly its permissions with its peers, the account and an expiry", async () => {
    const verdict = await callout([identity, peer]).authorize(request());
    if (!("jwt" in verdict)) throw new Error(`refused: ${verdict.refusal}`);
    const claims = decode<User>(verdict.jwt);
    expect(claims).toMatchObject({ iss: issuer.getPublicKey(), name: runnerUser("default", "r1"), aud: "$G", exp: Math.floor((NOW + 3_600_000) / 1000) });
    const perms = runnerPermissions({ poolId: "default", runnerId: "r1" }, [identity, peer]);
    expect(claims.nats.pub).toEqual({ allow: perms.publish.allow, deny: perms.publish.deny });
    expect(claims.nats.sub).toEqual({ allow: perms.subscribe.allow, deny: [] });
    expect(claims.nats.resp).toEqual({ max: 1, ttl: 60_000_000_000 });
  });

  it("refuses no key, no nonce or signature, a wrong signature, an unknown key and a revoked one", async () => {
    const c = callout([identity]);
    expect(await c.authorize(request({ nkey: "" }))).toEqual({ refusal: CalloutRefusal.noKey });
    expect(await c.authorize(request({ nonce: "" }))).toEqual({ refusal: CalloutRefusal.noNonce });
    expect(await c.authorize(request({ sig: "" }))).toEqual({ refusal: CalloutRefusal.noNonce });
    // Signed by someone else, or over another nonce: the public key alone proves nothing.
    const other = Buffer.from(createUser().sign(new TextEncoder().encode("n0nce-from-server"))).toString("base64url");
    expect(await c.authorize(request({ sig: other }))).toEqual({ refusal: CalloutRefusal.badSignature });
    const stranger = createUser();
    const strangerSig = Buffer.from(stranger.sign(new TextEncoder().encode("n0nce-from-server"))).toString("base64url");
    expect(await c.authorize(request({ nkey: stranger.getPublicKey(), sig: strangerSig }))).toEqual({ refusal: CalloutRefusal.unknownKey });
    expect(await callout([{ ...identity, revokedAt: 5 }]).authorize(request())).toEqual({ refusal: CalloutRefusal.revoked });
  });
});
