/**
 * Webhook delivery lag (issue 28's performance goal): 10 webhooks on one
 * workspace, one of them a slow receiver (2 s per request); N environment
 * updates are committed one after another, and each delivery's lag is the
 * time from the event's commit (`at`, stamped by the scheduler on this
 * machine's clock) to the receiver's 2xx. Beside it, in the same run, the
 * audit stream's own lag to a client following `GET /v1/events?follow=true`.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { startStack, type Stack } from "@paddock/testing";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";

const WEBHOOKS = 10;
const SLOW_ANSWER_MS = 2_000;

interface Receiver {
  url: string;
  lags: number[];
  server: Server;
}

/** A receiver that answers after delayMs and records each event's lag (receipt − commit). */
async function receiver(delayMs: number): Promise<Receiver> {
  const lags: number[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const at = (JSON.parse(body) as { data: { at: number } }).data.at;
      setTimeout(() => {
        lags.push(Date.now() - at);
        res.writeHead(204).end();
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, lags, server };
}

async function call(stack: Stack, method: string, path: string, body?: unknown): Promise<{ id: string }> {
  const res = await fetch(`${stack.url}${path}`, { method, headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, ...(body ? { body: JSON.stringify(body) } : {}) });
  if (res.status >= 300) throw new Error(`${method} ${path} answered ${res.status}`);
  return (await res.json()) as { id: string };
}

/** The lag of each event to a client following the audit stream (receipt − commit). */
async function followLags(stack: Stack, count: number): Promise<{ lags: number[]; done: Promise<void>; stop: () => void }> {
  const abort = new AbortController();
  const res = await fetch(`${stack.url}/v1/events?follow=true&since=now&resourceKind=environment&action=update`, { headers: { authorization: `Bearer ${stack.token}` }, signal: abort.signal });
  const lags: number[] = [];
  const done = (async () => {
    let rest = "";
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        rest += Buffer.from(chunk).toString();
        const lines = rest.split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) lags.push(Date.now() - (JSON.parse(line) as { at: number }).at);
        if (lags.length >= count) return;
      }
    } catch {
      // Aborted by stop().
    }
  })();
  return { lags, done, stop: () => abort.abort() };
}

export async function webhooksBench(opts: { events: number }): Promise<Figure[]> {
  const allow = { PADDOCK_WEBHOOK_ALLOW_PRIVATE: "1" };
  const stack = await startStack({ validateOutgoing: false, env: { gateway: allow, "event-recorder": allow } });
  const receivers = [await receiver(SLOW_ANSWER_MS)];
  for (let i = 1; i < WEBHOOKS; i++) receivers.push(await receiver(0));
  try {
    for (const r of receivers) await call(stack, "POST", "/v1/webhooks", { url: r.url, events: ["environment.update"] });
    const env = await call(stack, "POST", "/v1/environments", { name: "bench-webhooks" });
    const follow = await followLags(stack, opts.events);
    for (let i = 0; i < opts.events; i++) {
      await call(stack, "PATCH", `/v1/environments/${env.id}`, { init: `echo ${String(i)}` });
      // Spread over time, as commits come: a burst would measure queueing, not lag.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await follow.done;
    follow.stop();
    const fast = receivers.slice(1);
    // Every fast receiver has every event before the figure is read (the slow one is not waited for).
    while (fast.some((r) => r.lags.length < opts.events)) await new Promise((resolve) => setTimeout(resolve, 50));
    // The slow receiver's first in-flight window (16 deliveries at once) answered: its lag is its answer time plus queueing.
    const slowFirst = Math.min(16, opts.events);
    for (let i = 0; i < 600 && (receivers[0]?.lags.length ?? 0) < slowFirst; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    const fastLags = fast.flatMap((r) => r.lags);
    const p99 = percentile(fastLags, 99);
    const slow = receivers[0]?.lags ?? [];
    return [
      figure({
        bench: "webhooks",
        metric: `delivery lag p99, ${WEBHOOKS} webhooks, one answering in ${SLOW_ANSWER_MS / 1000} s (the others')`,
        value: p99,
        unit: "ms",
        baseline: { name: "events follow lag p99", value: percentile(follow.lags, 99) },
        goal: "≤ 500 ms",
        met: p99 <= 500,
      }),
      figure({ bench: "webhooks", metric: "delivery lag p50 (the others')", value: percentile(fastLags, 50), unit: "ms", baseline: { name: "events follow lag p50", value: percentile(follow.lags, 50) } }),
      figure({ bench: "webhooks", metric: `the slow receiver's lag p50 (${String(slow.length)} answered)`, value: percentile(slow.length ? slow : [0], 50), unit: "ms", baseline: { name: "its answer time", value: SLOW_ANSWER_MS } }),
    ];
  } finally {
    for (const r of receivers) {
      r.server.closeAllConnections();
      r.server.close();
    }
    await stopStackKeepingData(stack);
  }
}
