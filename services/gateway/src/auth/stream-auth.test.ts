/**
 * Open streams follow authorization (issue 21, item 8): a terminal socket and
 * an `events?follow=true` stream are closed when their token is revoked, or
 * when the membership they were allowed by is removed or downgraded below
 * what the stream does. Real nats-server, real WebSockets, real HTTP; the
 * changes are real KV writes, and the tests wait on the close events.
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import { Kvm } from "@nats-io/kv";
import { describe, expect, it } from "vitest";
import { Buckets, CLOSE_REVOKED } from "@paddock/contracts";
import { memberKey, seedMember, seedToken } from "./auth.ts";
import { api, makeSession, NOW, openOk, publishChunk, useHarness, TOKENS, WS1, type WsClient } from "../testing/testkit.ts";

let n = 0;

const h = useHarness();

/** A fresh user with a token and a membership of WS1. */
async function user(role: "member" | "admin"): Promise<{ actor: string; token: string }> {
  const actor = `u${++n}`;
  const token = `tok_stream_${actor}_0123456789abcdef`;
  await seedToken(h.nc, token, { workspaceId: WS1, actor: { id: actor, kind: "user" }, createdAt: NOW - 1000 });
  await seedMember(h.nc, { workspaceId: WS1, actorId: actor, role });
  return { actor, token };
}

function newSession(): string {
  const id = `st${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice" }));
  return id;
}

/** A followed events stream: resolves once the 200 is in; `ended` resolves when the server cuts it. */
function follow(query: string, token: string): Promise<{ res: IncomingMessage; ended: Promise<{ complete: boolean }> }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${h.url}/v1/events?${query}`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
      res.resume();
      const ended = new Promise<{ complete: boolean }>((done) => res.once("close", () => done({ complete: res.complete })));
      resolve({ res, ended });
    });
    req.on("error", reject);
    req.end();
  });
}

async function opened(c: WsClient): Promise<WsClient> {
  expect(await c.nextText()).toMatchObject({ type: "hello" });
  return c;
}

async function removeMember(actor: string): Promise<void> {
  await (await new Kvm(h.nc).open(Buckets.members)).delete(memberKey(WS1, actor));
}

describe("open streams follow authorization", () => {
  it("a member removed: its terminal socket closes with 4003 and its followed events are cut; another member's stay", async () => {
    const gone = await user("member");
    const stays = await user("member");
    const id = newSession();
    const socket = await opened(await openOk(h.wsUrl, id, "", gone.token));
    const events = await follow("follow=true", gone.token);
    const sessionEvents = await follow(`follow=true&sessionId=${id}`, gone.token);
    expect(events.res.statusCode).toBe(200);
    const other = await opened(await openOk(h.wsUrl, id, "", stays.token));

    await removeMember(gone.actor);
    expect(await socket.closed).toEqual({ code: CLOSE_REVOKED, reason: "access revoked" });
    expect(await events.ended).toEqual({ complete: false });
    expect(await sessionEvents.ended).toEqual({ complete: false });
    // The other member's socket is untouched: it still gets output.
    await publishChunk(h.nc, id, "main", "still-here");
    for (;;) {
      const f = await other.next();
      if (f.kind === "binary" && f.text.includes("still-here")) break;
    }
    other.close();
  });

  it("an admin controlling another's session, downgraded to member: the controller closes, its viewer stays", async () => {
    const ada = await user("admin");
    const id = newSession();
    const controller = await opened(await openOk(h.wsUrl, id, "mode=controller", ada.token));
    const viewer = await opened(await openOk(h.wsUrl, id, "mode=viewer", ada.token));

    await seedMember(h.nc, { workspaceId: WS1, actorId: ada.actor, role: "member" });
    expect(await controller.closed).toEqual({ code: CLOSE_REVOKED, reason: "access revoked" });
    await publishChunk(h.nc, id, "main", "viewer-still-here");
    for (;;) {
      const f = await viewer.next();
      if (f.kind === "binary" && f.text.includes("viewer-still-here")) break;
    }
    expect(viewer.ws.readyState).toBe(viewer.ws.OPEN);
    viewer.close();
  });

  it("a revoked token cuts its followed events stream (terminal sockets: tokens.test.ts)", async () => {
    const minted = await api(h.url, "POST", "/v1/tokens", { token: TOKENS.alice, body: "{}" });
    expect(minted.status).toBe(201);
    const events = await follow("follow=true", minted.json.token as string);
    expect(events.res.statusCode).toBe(200);
    expect((await api(h.url, "DELETE", `/v1/tokens/${minted.json.id as string}`, { token: TOKENS.alice })).status).toBe(200);
    expect(await events.ended).toEqual({ complete: false });
  });
});
