/**
 * Webhooks through the real stack (issue 28 item 4): the event recorder
 * delivers a workspace's audit events to registered receivers on loopback
 * (PADDOCK_WEBHOOK_ALLOW_PRIVATE=1 here), each delivery verified with the
 * Standard Webhooks specification's own library; a failing receiver is
 * retried on the schedule (shortened here) and then marked failed; a
 * receiver that never answers holds nothing of another webhook's deliveries;
 * a removed webhook gets nothing more.
 */
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Webhook } from "standardwebhooks";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import { Buckets, webhookConsumerName, webhookKey, WebhookDeliveries, type CreatedWebhook, type WebhookDelivery } from "@paddock/contracts";
import { startStack, type Stack } from "@paddock/testing";
import { api } from "./helpers.ts";

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  res: ServerResponse;
}

/** A receiver on loopback: each request handed to whoever waits next (or queued), answered by the test. */
class Receiver {
  private server: Server | undefined;
  private readonly queued: Received[] = [];
  private readonly waiting: Array<(r: Received) => void> = [];
  url = "";

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString("utf8")));
      req.on("end", () => {
        const r = { headers: req.headers, body, res };
        const next = this.waiting.shift();
        if (next) next(r);
        else this.queued.push(r);
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
    return this;
  }

  next(): Promise<Received> {
    const r = this.queued.shift();
    return r ? Promise.resolve(r) : new Promise((resolve) => this.waiting.push(resolve));
  }

  /** The next delivery whose payload matches, answering the others 200. */
  async nextMatching(match: (payload: Payload) => boolean): Promise<Received & { payload: Payload }> {
    for (;;) {
      const r = await this.next();
      const payload = JSON.parse(r.body) as Payload;
      if (match(payload)) return { ...r, payload };
      r.res.end();
    }
  }

  /** Payloads received and not yet taken. */
  pending(): Payload[] {
    return this.queued.map((r) => JSON.parse(r.body) as Payload);
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}

interface Payload {
  type: string;
  timestamp: string;
  data: { id: string; action: string; resource: { kind: string; id: string }; seq: number };
}

let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  const webhookEnv = { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" };
  stack = await startStack({ secretFiles: true, env: { gateway: webhookEnv, "event-recorder": { ...webhookEnv, PADDOCK_WEBHOOK_RETRY_SCHEDULE_MS: "50,50" } } });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
});

const register = async (url: string, events?: string[]): Promise<CreatedWebhook> => {
  const r = await api(stack.url, stack.token, "POST", "/v1/webhooks", { url, ...(events ? { events } : {}) });
  expect(r.status).toBe(201);
  return r.body as CreatedWebhook;
};
const createSession = async (): Promise<string> => ((await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { cmd: ["sleep", "600"] } })).body as { id: string }).id;

/** The webhook's deliveries record once it holds what `done` waits for (a KV watch: no polling). */
async function deliveriesUntil(hook: CreatedWebhook, done: (d: WebhookDelivery[]) => boolean): Promise<WebhookDelivery[]> {
  const kv = await new Kvm(nc).open(Buckets.webhookDeliveries);
  const watch = await kv.watch({ key: webhookKey(hook.workspaceId, hook.id) });
  try {
    for await (const e of watch) {
      const d = e.operation === "PUT" ? WebhookDeliveries.parse(JSON.parse(Buffer.from(e.value).toString())).deliveries : [];
      if (done(d)) return d;
    }
  } finally {
    watch.stop();
  }
  throw new Error("the deliveries watch ended");
}

describe("webhooks", () => {
  it("delivers the workspace's matching events, each verified by the Standard Webhooks library with the secret answered once", async () => {
    const receiver = await new Receiver().start();
    try {
      const hook = await register(receiver.url, ["session.create"]);
      const sessionId = await createSession();
      const got = await receiver.nextMatching((p) => p.data.resource.id === sessionId);
      got.res.end();
      // The spec's own library checks the id, timestamp and v1 signature, and gives back the payload.
      const verified = new Webhook(hook.secret.slice("whsec_".length)).verify(got.body, got.headers as Record<string, string>) as Payload;
      expect(verified.type).toBe("session.create");
      expect(verified.data).toMatchObject({ action: "create", resource: { kind: "session", id: sessionId } });
      expect(got.headers["webhook-id"]).toBe(verified.data.id);
      expect(got.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
      // A body changed on the way fails the same check.
      expect(() => new Webhook(hook.secret.slice("whsec_".length)).verify(got.body.replace(sessionId, "someone-else"), got.headers as Record<string, string>)).toThrow();
      const delivered = await deliveriesUntil(hook, (d) => d.some((x) => x.eventId === verified.data.id && x.outcome === "delivered"));
      expect(delivered[0]).toMatchObject({ eventId: verified.data.id, type: "session.create", attempt: 1, outcome: "delivered", status: 200 });
      const listed = await api(stack.url, stack.token, "GET", `/v1/webhooks/${hook.id}/deliveries`);
      expect((listed.body as { deliveries: WebhookDelivery[] }).deliveries[0]).toMatchObject({ eventId: verified.data.id, outcome: "delivered" });
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sessionId}`);
      await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${hook.id}`);
    } finally {
      await receiver.stop();
    }
  });

  it("retries a failed attempt on the schedule, then marks the delivery failed after the last one", async () => {
    const flaky = await new Receiver().start();
    try {
      const hook = await register(flaky.url, ["session.create"]);
      const sessionId = await createSession();
      const first = await flaky.nextMatching((p) => p.data.resource.id === sessionId);
      first.res.writeHead(500).end();
      const second = await flaky.nextMatching((p) => p.data.resource.id === sessionId);
      expect(second.headers["webhook-id"]).toBe(first.headers["webhook-id"]);
      second.res.writeHead(503).end();
      const third = await flaky.nextMatching((p) => p.data.resource.id === sessionId);
      third.res.writeHead(500).end();
      const eventId = first.headers["webhook-id"] as string;
      const attempts = await deliveriesUntil(hook, (d) => d.some((x) => x.eventId === eventId && x.outcome === "failed"));
      const mine = attempts.filter((x) => x.eventId === eventId).map((x) => [x.attempt, x.outcome, x.status]);
      expect(mine).toEqual([
        [3, "failed", 500],
        [2, "retrying", 503],
        [1, "retrying", 500],
      ]);
      expect(attempts.find((x) => x.eventId === eventId && x.attempt === 1)?.nextAttemptAt).toBeTypeOf("number");
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sessionId}`);
      await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${hook.id}`);
    } finally {
      await flaky.stop();
    }
  });

  it("a receiver that never answers holds nothing of another webhook's deliveries; a removed webhook gets nothing more", async () => {
    const stuck = await new Receiver().start();
    const healthy = await new Receiver().start();
    try {
      const slow = await register(stuck.url, ["session.create"]);
      const fast = await register(healthy.url, ["session.create"]);
      const sessionId = await createSession();
      // The stuck receiver has the event and holds its answer...
      const held = await stuck.nextMatching((p) => p.data.resource.id === sessionId);
      // ...while the other webhook is delivered the same event.
      const prompt = await healthy.nextMatching((p) => p.data.resource.id === sessionId);
      prompt.res.end();
      expect(held.res.writableEnded).toBe(false);
      held.res.end();
      await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${fast.id}`);
      await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${slow.id}`);
      // After removal: a new session's event reaches a fresh webhook but not the removed ones' receivers.
      const probe = await new Receiver().start();
      try {
        const after = await register(probe.url, ["session.create"]);
        const later = await createSession();
        (await probe.nextMatching((p) => p.data.resource.id === later)).res.end();
        // The removed webhooks' consumers are gone (their deliveries record too): their receivers got nothing of it.
        const jsm = await jetstreamManager(nc);
        const names: string[] = [];
        for await (const c of jsm.consumers.list("AUDIT")) names.push(c.name);
        expect(names).not.toContain(webhookConsumerName(fast.workspaceId, fast.id));
        expect(names).toContain(webhookConsumerName(after.workspaceId, after.id));
        const kv = await new Kvm(nc).open(Buckets.webhookDeliveries);
        expect((await kv.get(webhookKey(fast.workspaceId, fast.id)))?.operation ?? "none").not.toBe("PUT");
        expect([...healthy.pending(), ...stuck.pending()].filter((p) => p.data.resource.id === later)).toEqual([]);
        await api(stack.url, stack.token, "DELETE", `/v1/webhooks/${after.id}`);
        await api(stack.url, stack.token, "DELETE", `/v1/sessions/${later}`);
      } finally {
        await probe.stop();
      }
      await api(stack.url, stack.token, "DELETE", `/v1/sessions/${sessionId}`);
    } finally {
      await stuck.stop();
      await healthy.stop();
    }
  });
});
