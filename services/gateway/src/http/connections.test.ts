/**
 * Connection caps and the header timeout (issue 21, item 12): a client that
 * opens sockets and trickles headers holds at most its own address's share
 * of the gateway, for at most the header timeout each, and other clients are
 * still served. Real sockets against a real gateway; other client addresses
 * are other loopback addresses (`localAddress`).
 */
import { connect as tcpConnect, type Socket } from "node:net";
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "../testing/testkit.ts";

let h: Harness;
let port: number;
const sockets: Socket[] = [];

beforeAll(async () => {
  // A header timeout far beyond the test: here the caps alone must hold the sockets off.
  h = await startHarness({ config: { httpMaxConnections: 5, httpMaxConnectionsPerAddress: 3, httpHeadersTimeoutMs: 600_000 } });
  port = Number(new URL(h.url).port);
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await h.stop();
});

/** Everything a raw socket receives until the server closes it. */
function received(s: Socket): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    s.on("data", (d: Buffer) => (text += d.toString("utf8")));
    s.once("close", () => resolve(text));
  });
}

/** Resolves with the first complete response head + body chunk seen on a socket. */
function nextResponse(s: Socket): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    const onData = (d: Buffer) => {
      text += d.toString("utf8");
      if (/\r\n\r\n/.test(text) && text.includes('"status"')) {
        s.off("data", onData);
        resolve(text);
      }
    };
    s.on("data", onData);
  });
}

function open(localAddress: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = tcpConnect({ host: "127.0.0.1", port, localAddress }, () => resolve(s));
    s.once("error", reject);
    sockets.push(s);
  });
}

/**
 * A connection the gateway has accepted (it answered one request on it) that
 * then trickles the headers of its next request and never finishes them.
 */
async function trickler(localAddress: string): Promise<Socket> {
  const s = await open(localAddress);
  const answered = nextResponse(s);
  s.write("GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n");
  expect(await answered).toMatch(/^HTTP\/1\.1 200/);
  s.write("GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Slow: a");
  return s;
}

function healthz(localAddress: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port, path: "/healthz", localAddress, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    req.end();
  });
}

describe("connection caps", () => {
  it("one address holding its cap in trickling sockets is refused more (429), other addresses are served, and the total cap answers 503", async () => {
    for (let i = 0; i < 3; i++) await trickler("127.0.0.1");
    const over = await open("127.0.0.1");
    const answer = await received(over);
    expect(answer).toMatch(/^HTTP\/1\.1 429/);
    expect(answer).toMatch(/\r\nRetry-After: 1\r\n/);
    expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toEqual({
      error: { code: "rate_limited", message: "at most 3 open connections per client address" },
    });
    // Another client is served while the first holds its share.
    expect(await healthz("127.0.0.2")).toBe(200);

    // Four held now (three trickling, one more from another address); a fifth fills the gateway.
    await trickler("127.0.0.3");
    await trickler("127.0.0.4");
    const full = await received(await open("127.0.0.5"));
    expect(full).toMatch(/^HTTP\/1\.1 503/);
    expect(full).toContain('"code":"unavailable"');
    const refused = (await h.metrics.connectionsRefused.get()).values;
    expect(refused.find((v) => v.labels.reason === "per_address")?.value).toBe(1);
    expect(refused.find((v) => v.labels.reason === "total")?.value).toBe(1);
  });
});

describe("header timeout", () => {
  let slow: Harness;
  beforeAll(async () => {
    slow = await startHarness({ config: { httpHeadersTimeoutMs: 200 } });
  });
  afterAll(async () => slow.stop());

  it("a request whose headers never complete is answered 408 and closed", async () => {
    const s = await new Promise<Socket>((resolve, reject) => {
      const c = tcpConnect({ host: "127.0.0.1", port: Number(new URL(slow.url).port) }, () => resolve(c));
      c.once("error", reject);
    });
    const answer = received(s);
    s.write("GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Slow: a");
    expect(await answer).toMatch(/^HTTP\/1\.1 408/);
  });
});
