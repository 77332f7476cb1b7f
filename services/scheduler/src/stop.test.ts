/**
 * A replica that stops (a rolling restart) answers the requests it had taken
 * before it goes: it stops taking new ones first, and stops its views and
 * fact consumer only once those are answered.
 */
import { describe, expect, it } from "vitest";
import { Api } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { alice, dispatchInbox, factFor, publishFact, register, runningSession, useHarness, type SchedulerHarness } from "./testing/testkit.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

describe("stopping a scheduler replica", () => {
  it("answers a request it took with its outcome, still applying the runner's facts while it stops", async () => {
    const s = await h.start();
    const inbox = await dispatchInbox(h.nc, "r1");
    await register(h.nc, { runnerId: "r1", generation: 1 });
    const { session } = await runningSession(h.nc, "r1", inbox);
    const suspending = callRpc(h.nc, Api.suspendSession, { scope: alice, sessionId: session.id, warm: true });
    // The replica has taken the request: it sent the runner the suspend and waits for its fact.
    const cmd = await inbox.next();
    h.schedulers.splice(h.schedulers.indexOf(s), 1);
    const stopping = s.stop();
    await publishFact(h.nc, factFor("r1", cmd, { type: "suspended", warm: true }));
    // Stopped at once, it would answer the pending record after its wait (its views and facts consumer gone).
    const answer = await suspending;
    expect(answer.session).toMatchObject({ state: "suspended_warm" });
    expect(answer.session.pending).toBeUndefined();
    await stopping;
  });
});
