/**
 * The bad-input scenario's preview case (issue 25 item 6): what a hostile
 * client sends at ANY /v1/sessions/:id/ports/:port/…, against a session of
 * its own whose app listens on two ports (one private, one public). Unknown
 * sessions and undeclared or impossible ports (404), a private port without
 * a token (401), request smuggling (Content-Length beside chunked, a bare LF,
 * a second request hidden in a body), headers past the server's bound (431),
 * a slow client that never finishes its headers (the gateway closes it), and
 * a client gone mid-download; and at each runner's data plane (decision
 * 0052) what a stranger on the network sends: no ticket, a guessed one, an
 * HTTP request, a megabyte of noise, silence (each closed without a byte).
 * Afterwards the app still answers, and no smuggled request reached it.
 */
import { randomBytes } from "node:crypto";
import { connect as netConnect } from "node:net";
import type { Session } from "@paddock/contracts";
import { previewAppSpec, putPreviewApp, untilAnswers } from "@paddock/testing";
import { api } from "./client.ts";
import type { FuzzContext } from "./fuzz-context.ts";
import { log } from "./report.ts";
import { CHAOS_PREVIEW_HOST } from "./stack.ts";


/** What the gateway answers on a raw socket (its status line), or how the socket ended. */
function raw(url: string, bytes: string, idleMs = 15_000): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = netConnect(Number(port), hostname);
    let got = "";
    const done = (why: string) => {
      socket.destroy();
      resolve(got.split("\r\n")[0] || why);
    };
    socket.setTimeout(idleMs, () => done("no answer"));
    socket.on("data", (d: Buffer) => (got += d.toString("latin1")));
    socket.once("end", () => done("closed"));
    socket.once("error", () => done("reset"));
    socket.once("close", () => done("closed"));
    socket.write(bytes);
  });
}

export async function previewCase(ctx: FuzzContext): Promise<void> {
  const { stack, anomalies } = ctx;
  let sent = 0;
  const created = await api(stack.url, stack.token, "POST", "/v1/sessions", { spec: { apps: [previewAppSpec("web", [{ port: 8000 }, { port: 8001, public: true }])] } });
  if (created.status !== 201) {
    anomalies.add("service stopped working", `preview case: create answered ${created.status}`);
    return;
  }
  const id = (created.body as Session).id;
  await api(stack.url, stack.token, "GET", `/v1/sessions/${id}?waitFor=running&timeoutMs=60000`);
  await putPreviewApp(stack.url, stack.token, id);
  const base = `${stack.url}/v1/sessions/${id}/ports`;
  // Up once the public port answers.
  const up = await untilAnswers(`${base}/8001/`).then(() => true, () => false);
  if (!up) anomalies.add("service stopped working", "preview case: the app's public port never answered");

  const expect = async (what: string, status: number, url: string, init?: RequestInit) => {
    sent += 1;
    const res = await fetch(url, { redirect: "manual", ...init }).catch(() => undefined);
    const got = res?.status ?? 0;
    await res?.arrayBuffer().catch(() => undefined);
    if (got !== status) anomalies.add(got >= 500 && got !== 502 ? "5xx answers" : "malformed requests accepted", `preview ${what}: ${got}, expected ${status}`);
  };
  await expect("of an undeclared port", 404, `${base}/9/`, { headers: { authorization: `Bearer ${stack.token}` } });
  await expect("of an unknown session", 404, `${stack.url}/v1/sessions/ses_${"q".repeat(20)}/ports/8001/`);
  await expect("of port 0", 404, `${base}/0/`);
  await expect("of port 70000", 404, `${base}/70000/`);
  await expect("of a private port without a token", 401, `${base}/8000/`);
  await expect("with a forged token", 401, `${base}/8000/`, { headers: { authorization: "Bearer pdk_forged_0000000000000000" } });

  const host = new URL(stack.url).host;
  const path = `/v1/sessions/${id}/ports/8001`;
  const byHost = `8001-${id}.${CHAOS_PREVIEW_HOST}`;
  for (const [what, bytes, ok] of [
    ["Content-Length beside chunked", `POST ${path}/echo HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET ${path}/smuggled HTTP/1.1\r\nHost: ${host}\r\n\r\n`, /^HTTP\/1\.1 400/],
    ["a bare LF in a header", `GET ${path}/ HTTP/1.1\r\nHost: ${host}\r\nX-A: 1\nX-B: 2\r\n\r\n`, /^HTTP\/1\.1 400/],
    ["headers past the bound", `GET ${path}/ HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${"a".repeat(40_000)}\r\n\r\n`, /^HTTP\/1\.1 431/],
    ["a request line with a space in the path", `GET ${path}/a b HTTP/1.1\r\nHost: ${host}\r\n\r\n`, /^HTTP\/1\.1 400/],
    ["a slow client that never ends its headers", `GET ${path}/ HTTP/1.1\r\nHost: ${host}\r\nX-Slow: 1\r\n`, /^(HTTP\/1\.1 408|closed|reset)/],
    // Previews by host: smuggling through one, and preview hosts that name no preview (never the gateway's own routes).
    ["Content-Length beside chunked, by host", `POST /echo HTTP/1.1\r\nHost: ${byHost}\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: ${byHost}\r\n\r\n`, /^HTTP\/1\.1 400/],
    ["a preview host of port 0", `GET /v1/sessions HTTP/1.1\r\nHost: 0-${id}.${CHAOS_PREVIEW_HOST}\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 404/],
    ["a preview host with a label too many", `GET /v1/sessions HTTP/1.1\r\nHost: x.8001-${id}.${CHAOS_PREVIEW_HOST}\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 404/],
    ["a preview host with an absolute request target", `GET http://elsewhere/ HTTP/1.1\r\nHost: ${byHost}\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 404/],
    ["a preview host of an undeclared port", `GET / HTTP/1.1\r\nHost: 9-${id}.${CHAOS_PREVIEW_HOST}\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 404/],
  ] as const) {
    sent += 1;
    const answer = await raw(stack.url, bytes);
    if (!ok.test(answer)) anomalies.add("malformed requests accepted", `preview ${what}: ${answer.slice(0, 80)}`);
  }

  sent += await dataPlaneCase(ctx, path);

  // A client gone mid-download: the app and the tunnel let go; the next request is served.
  const ac = new AbortController();
  const big = await fetch(`${base}/8001/big?mb=64`, { signal: ac.signal }).catch(() => undefined);
  sent += 1;
  if (big?.body) {
    await big.body.getReader().read().catch(() => undefined);
    ac.abort();
  }
  const after = await fetch(`${base}/8001/seen`).catch(() => undefined);
  const seen = after?.status === 200 ? ((await after.json()) as string[]) : undefined;
  if (!seen) anomalies.add("service stopped working", `preview case: the app did not answer after the hostile requests (${after?.status ?? "no answer"})`);
  // No smuggled request reached the app (nor any of the refused ones).
  const reached = (seen ?? []).filter((p) => !["/", "/big", "/seen"].includes(p));
  if (reached.length > 0) anomalies.add("malformed requests accepted", `preview: the app was asked for ${reached.join(", ").slice(0, 160)}`);

  await api(stack.url, stack.token, "DELETE", `/v1/sessions/${id}`);
  ctx.sent.set("preview hostile calls", sent);
  log("bad-input", `preview case: ${sent} hostile preview calls`);
}

/** Strangers at every runner's data plane: each connection is closed without a byte; the count of calls sent. */
async function dataPlaneCase(ctx: FuzzContext, path: string): Promise<number> {
  let sent = 0;
  for (const id of ctx.stack.runnerIds) {
    // The latest start's (a runner restarted by an earlier scenario listens anew).
    const listening = ctx.stack.member(id).proc?.logs.findLast((l) => l.msg === "data plane listening");
    if (typeof listening?.port !== "number") continue;
    const url = `http://${String(listening.host)}:${listening.port}`;
    for (const [what, bytes] of [
      ["a guessed ticket", randomBytes(32).toString("latin1")],
      ["an HTTP request", `GET ${path}/ HTTP/1.1\r\nHost: x\r\n\r\n`],
      ["a megabyte of noise", randomBytes(1024 * 1024).toString("latin1")],
      ["a few bytes, then silence", "pdp"],
      ["nothing at all", ""],
    ] as const) {
      sent += 1;
      const answer = await raw(url, bytes);
      if (answer !== "closed" && answer !== "reset") ctx.anomalies.add("malformed requests accepted", `data plane, ${what}: answered ${answer.slice(0, 80)}`);
    }
  }
  if (sent === 0) ctx.anomalies.add("service stopped working", "preview case: no runner said where its data plane listens");
  return sent;
}
