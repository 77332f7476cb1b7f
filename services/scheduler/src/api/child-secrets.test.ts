/**
 * A secret's value reaches only sessions an admin allowed it for (issue 21,
 * item 7): a session's token creates children only in environments whose
 * secrets its own session was given, so a child never widens them.
 */
import { describe, expect, it } from "vitest";
import { Api, type Scope } from "@paddock/contracts";
import { callRpc } from "@paddock/bus";
import { alice, create, useHarness, type SchedulerHarness } from "../testing/testkit.ts";

let h: SchedulerHarness;
useHarness((started) => (h = started));

const asSession = (id: string): Scope => ({ workspaceId: "ws1", actor: { id, kind: "service" }, sessionId: id });

async function environment(name: string, secretRefs: string[]): Promise<string> {
  return (await callRpc(h.nc, Api.createEnvironment, { scope: alice, body: { name, secretRefs } })).environment.id;
}

describe("children and secrets", () => {
  it("a session's token creates children only in environments whose secrets its own session was given", async () => {
    await h.start();
    const granted = await environment("granted", ["API_KEY", "DB_URL"]);
    const subset = await environment("subset", ["API_KEY"]);
    const wider = await environment("wider", ["API_KEY", "DB_PASSWORD"]);
    const none = await environment("none", []);
    const { session: parent } = await create(h.nc, alice, { environmentId: granted });

    for (const environmentId of [granted, subset, none]) {
      const { session: child } = await create(h.nc, asSession(parent.id), { environmentId });
      expect(child.parentId).toBe(parent.id);
    }
    const refused = create(h.nc, asSession(parent.id), { environmentId: wider });
    await expect(refused).rejects.toMatchObject({ code: "forbidden" });
    await expect(refused).rejects.toThrow(/DB_PASSWORD/);

    // A session without an environment was given no secret at all.
    const { session: bare } = await create(h.nc, alice, {});
    await expect(create(h.nc, asSession(bare.id), { environmentId: subset })).rejects.toMatchObject({ code: "forbidden" });
    expect((await create(h.nc, asSession(bare.id), { environmentId: none })).session.parentId).toBe(bare.id);
    // A member is not bound by a parent it names: it may start any environment of its workspace.
    expect((await create(h.nc, alice, { environmentId: wider, parentId: bare.id })).session.parentId).toBe(bare.id);
  });
});
