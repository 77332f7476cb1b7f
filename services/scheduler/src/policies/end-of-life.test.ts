/**
 * A session's end of life (token revocation, sandbox teardown, children) is
 * done even when the first try fails or the replica that ended the session
 * dies before trying.
 */
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Api, Buckets, type Session } from "@paddock/contracts";
import { tokenKey } from "@paddock/contracts/token-key";
import { callRpc, provision } from "@paddock/bus";
import { alice, dispatchInbox, register, runningSession, serviceTokenOf, useHarness, tokenRevoked, waitForState, type SchedulerHarness } from "../testing/testkit.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

/** A running session on r1 and its service token. */
async function runningWithToken() {
  const inbox = await dispatchInbox(h.nc, "r1");
  await register(h.nc, { runnerId: "r1", generation: 1 });
  const { session, start } = await runningSession(h.nc, "r1", inbox);
  return { session, token: await serviceTokenOf(h.nc, start, "r1"), inbox };
}

describe("end of life", () => {
  it("is tried again after a failure until it is done", async () => {
    await h.start();
    const { session, inbox } = await runningWithToken();
    // The token bucket gone: what a broker failover looks like to the revocation.
    const jsm = await jetstreamManager(h.nc);
    await jsm.streams.delete(`KV_${Buckets.tokens}`);
    try {
      await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: session.id });
      await waitForState(h.nc, session.id, "destroyed");
    } finally {
      await provision(h.nc, { replicas: 1 });
    }
    // The teardown comes after the revocation: it arrives once a retry got through.
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: session.id });
  });

  it("is done by a replica that starts after the one that ended the session died before doing it", async () => {
    const first = await h.start();
    const { session, token, inbox } = await runningWithToken();
    await first.stop();
    // What the dead replica left: the record ended, the token still valid, no teardown sent.
    const kv = await new Kvm(h.nc).open(Buckets.sessions);
    const ended: Session = { ...session, state: "destroyed", updatedAt: h.clock.ms };
    await kv.put(`ws1.${session.id}`, JSON.stringify(ended));
    const tokens = await new Kvm(h.nc).open(Buckets.tokens);
    expect((await tokens.get(tokenKey(token)))?.operation).toBe("PUT");
    const second = await h.start();
    await tokenRevoked(h.nc, token);
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: session.id });
    expect(await second.replayed).toBe(1);
  });

  it("is not done again by a replica that starts after it was done", async () => {
    const first = await h.start();
    const { session, token, inbox } = await runningWithToken();
    await callRpc(h.nc, Api.deleteSession, { scope: alice, sessionId: session.id });
    expect(await inbox.next()).toMatchObject({ type: "destroy", sessionId: session.id });
    await tokenRevoked(h.nc, token);
    await first.stop();
    const second = await h.start();
    expect(await second.replayed).toBe(0);
  });
});
