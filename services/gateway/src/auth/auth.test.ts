/**
 * The Authorizer's rules for a session's own token (issue 26, item 6): it
 * creates and lists sessions, reads its own session, and reads, deletes and
 * recycles the sessions it created; anything else of another session is the
 * not_found of one that does not exist, anything else of the workspace 403.
 */
import { describe, expect, it } from "vitest";
import type { KV } from "@nats-io/kv";
import type { Scope } from "@paddock/contracts";
import { Action, Authorizer, type Resource } from "./auth.ts";

const WS = "ws1";
const PARENT = "ses_parent";
/** A session's principal as the scheduler mints it: actor id = session id. */
const asSession: Scope = { workspaceId: WS, actor: { id: PARENT, kind: "service" }, sessionId: PARENT };

/** No memberships at all: a session's principal has none. */
const noMembers = (() => Promise.resolve({ get: () => Promise.resolve(null) } as unknown as KV)) satisfies () => Promise<KV>;
const authorizer = new Authorizer(noMembers);

const session = (id: string, creatorId: string, workspaceId = WS): Resource => ({ kind: "session", workspaceId, id, creatorId });
const own = session(PARENT, "alice");
const child = session("ses_child", PARENT);
const sibling = session("ses_sibling", "alice");
const grandchild = session("ses_grandchild", "ses_child");
const workspace: Resource = { kind: "workspace", workspaceId: WS };

const code = (p: Promise<void>) => p.then(() => "ok", (err: { code?: string }) => err.code ?? "thrown");

describe("a session's own token (no membership)", () => {
  it("gets, deletes and recycles a session it created", async () => {
    for (const action of [Action.getSession, Action.deleteSession, Action.recycleSession]) {
      expect(await code(authorizer.authorize(asSession, action, child)), action).toBe("ok");
    }
  });

  it("creates and lists sessions (the scheduler lists it only those it created)", async () => {
    expect(await code(authorizer.authorize(asSession, Action.createSession, workspace))).toBe("ok");
    expect(await code(authorizer.authorize(asSession, Action.listSessions, workspace))).toBe("ok");
  });

  it("may not control a session it created any other way: forbidden (it may see it)", async () => {
    for (const action of [Action.suspendSession, Action.exec, Action.attachController, Action.attachViewer, Action.readLog, Action.pushWorkspace, Action.restartApp]) {
      expect(await code(authorizer.authorize(asSession, action, child)), action).toBe("forbidden");
    }
  });

  it("reads its own session; deleting or recycling it is forbidden", async () => {
    expect(await code(authorizer.authorize(asSession, Action.getSession, own))).toBe("ok");
    expect(await code(authorizer.authorize(asSession, Action.deleteSession, own))).toBe("forbidden");
    expect(await code(authorizer.authorize(asSession, Action.recycleSession, own))).toBe("forbidden");
  });

  it("a sibling, a grandchild, or its own parent: not_found, whatever the action", async () => {
    const parent = session("ses_grandparent", "alice");
    for (const r of [sibling, grandchild, parent]) {
      for (const action of [Action.getSession, Action.deleteSession, Action.recycleSession, Action.suspendSession, Action.readLog]) {
        expect(await code(authorizer.authorize(asSession, action, r)), `${action} ${r.kind === "session" ? r.id : ""}`).toBe("not_found");
      }
    }
  });

  it("another workspace's session it (by id) created is not_found", async () => {
    expect(await code(authorizer.authorize(asSession, Action.getSession, session("ses_child", PARENT, "ws2")))).toBe("not_found");
  });

  it("other workspace-level actions are forbidden", async () => {
    for (const action of [Action.listEnvironments, Action.createEnvironment, Action.readEvents, Action.listRunners, Action.listTokens, Action.createToken, Action.listSecrets]) {
      expect(await code(authorizer.authorize(asSession, action, workspace)), action).toBe("forbidden");
    }
  });

  it("a user who created the session gains nothing from the roster rule (it applies to session tokens only)", async () => {
    const alice: Scope = { workspaceId: WS, actor: { id: "alice", kind: "user" } };
    // alice has no membership here: her own session is not_found like any other.
    expect(await code(authorizer.authorize(alice, Action.getSession, sibling))).toBe("not_found");
    expect(await code(authorizer.authorize(alice, Action.listSessions, workspace))).toBe("forbidden");
  });
});

describe("agents (issue 26)", () => {
  const members = (role: "admin" | "member") =>
    (() => Promise.resolve({ get: () => Promise.resolve({ operation: "PUT", value: new TextEncoder().encode(JSON.stringify({ workspaceId: WS, actorId: "bob", role })) }) } as unknown as KV)) satisfies () => Promise<KV>;
  const bob: Scope = { workspaceId: WS, actor: { id: "bob", kind: "user" } };

  it("a session's own token declares and reads its own agents, and no one else's (its children's included)", async () => {
    for (const action of [Action.writeAgents, Action.readAgents]) {
      expect(await code(authorizer.authorize(asSession, action, own)), action).toBe("ok");
      expect(await code(authorizer.authorize(asSession, action, child)), action).toBe("forbidden");
      expect(await code(authorizer.authorize(asSession, action, sibling)), action).toBe("not_found");
    }
  });

  it("a member reads any session's agents; only the creator or an admin writes them", async () => {
    const member = new Authorizer(members("member"));
    expect(await code(member.authorize(bob, Action.readAgents, sibling))).toBe("ok");
    expect(await code(member.authorize(bob, Action.writeAgents, sibling))).toBe("forbidden");
    expect(await code(member.authorize(bob, Action.writeAgents, session("ses_bobs", "bob")))).toBe("ok");
    expect(await code(new Authorizer(members("admin")).authorize(bob, Action.writeAgents, sibling))).toBe("ok");
  });
});
