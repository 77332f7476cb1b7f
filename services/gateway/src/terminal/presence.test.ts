import { describe, expect, it } from "vitest";
import { decodeJson } from "@paddock/bus";
import { Presence, Subjects } from "@paddock/contracts";
import { Collector, makeSession, ManualEvery, openOk, useHarness, TOKENS, WS1 } from "../testing/testkit.ts";

const INTERVAL = 1234;
const every = new ManualEvery();
let n = 0;
const h = useHarness({ every: every.every, config: { presenceIntervalMs: INTERVAL } });

function newSession(): string {
  const id = `p${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice" }));
  return id;
}

async function nextPresence(c: Collector): Promise<Presence> {
  const decoded = decodeJson(Presence, (await c.next()).data);
  if (!decoded.ok) throw new Error(decoded.reason);
  return decoded.value;
}

describe("presence heartbeats", () => {
  it("publishes at once on the first attach, every interval while attached, and clients: 0 once when the last leaves", async () => {
    const id = newSession();
    const presence = new Collector(h.nc, Subjects.presence(id));
    const viewer = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    expect(await viewer.nextText()).toMatchObject({ type: "hello" });
    expect(await nextPresence(presence)).toEqual({ sessionId: id, workspaceId: WS1, clients: 1 });
    expect(every.periods).toContain(INTERVAL);

    // A second client does not publish by itself; the next heartbeat counts it.
    const controller = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await controller.nextText()).toMatchObject({ type: "hello" });
    every.tick();
    expect(await nextPresence(presence)).toEqual({ sessionId: id, workspaceId: WS1, clients: 2 });

    viewer.close();
    await viewer.closed;
    await waitFor(() => h.gateway.terminals.presence.clientsOf(id) === 1);
    every.tick();
    expect(await nextPresence(presence)).toMatchObject({ clients: 1 }); // nothing was published when the viewer left

    controller.close();
    expect(await nextPresence(presence)).toMatchObject({ clients: 0 });
    expect(every.active).toBe(0);
    every.tick(); // no timer left: nothing more is published
    await h.nc.flush();
    presence.sub.unsubscribe();
    expect(h.gateway.terminals.presence.clientsOf(id)).toBe(0);
  });

  it("counts per session", async () => {
    const a = newSession();
    const b = newSession();
    const pa = new Collector(h.nc, Subjects.presence(a));
    const pb = new Collector(h.nc, Subjects.presence(b));
    const ca = await openOk(h.wsUrl, a, "since=all", TOKENS.bob);
    const cb = await openOk(h.wsUrl, b, "since=all", TOKENS.bob);
    expect(await nextPresence(pa)).toMatchObject({ sessionId: a, clients: 1 });
    expect(await nextPresence(pb)).toMatchObject({ sessionId: b, clients: 1 });
    ca.close();
    expect(await nextPresence(pa)).toMatchObject({ clients: 0 });
    every.tick();
    expect(await nextPresence(pb)).toMatchObject({ sessionId: b, clients: 1 });
    cb.close();
    expect(await nextPresence(pb)).toMatchObject({ clients: 0 });
  });
});

describe("status frames", () => {
  it("a committed fact of the session (its audit event) sends the new state to attached clients, once per change", async () => {
    const id = newSession();
    const viewer = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    const controller = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await viewer.nextText()).toMatchObject({ type: "hello" });
    expect(await controller.nextText()).toMatchObject({ type: "hello" });
    const fact = () => h.nc.publish(Subjects.audit(WS1, "session", id), "{}");

    const s = h.scheduler.sessions.get(`${WS1}.${id}`);
    if (!s) throw new Error("no session");
    h.scheduler.put({ ...s, state: "suspended_warm" });
    fact();
    expect(await viewer.nextText()).toEqual({ type: "status", state: "suspended_warm" });
    expect(await controller.nextText()).toEqual({ type: "status", state: "suspended_warm" });

    fact(); // a fact that does not change the state sends nothing
    await waitFor(() => h.scheduler.callsOf("get").length >= 4);
    h.scheduler.put({ ...s, state: "running" });
    fact();
    expect(await viewer.nextText()).toEqual({ type: "status", state: "running" });
    expect(await controller.nextText()).toEqual({ type: "status", state: "running" });
    expect(viewer.queued).toBe(0);
    viewer.close();
    controller.close();
  });

  it("another session's facts are not read", async () => {
    const id = newSession();
    const other = newSession();
    const viewer = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    expect(await viewer.nextText()).toMatchObject({ type: "hello" });
    const before = h.scheduler.callsOf("get").length;
    h.nc.publish(Subjects.audit(WS1, "session", other), "{}");
    await h.nc.flush();
    await new Promise((r) => setTimeout(r, 50));
    expect(h.scheduler.callsOf("get").length).toBe(before);
    viewer.close();
  });
});

async function waitFor(cond: () => boolean, ms = 2000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}
