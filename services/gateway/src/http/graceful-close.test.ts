/**
 * The gateway's graceful close: a request in flight when SIGTERM came is
 * answered (with `Connection: close`), idle keep-alive sockets are closed,
 * new connections are refused, and only what outlives the grace is cut.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { GracefulClose } from "./graceful-close.ts";

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const sockets: Socket[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
});

async function serve(handler: Handler) {
  const server = createServer({ keepAliveTimeout: 65_000 });
  const graceful = new GracefulClose(server);
  let arrived: () => void = () => undefined;
  const requestArrived = new Promise<void>((r) => (arrived = r));
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    graceful.track(req, res);
    arrived();
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { graceful, port: (server.address() as AddressInfo).port, requestArrived };
}

function get(port: number): Promise<{ status: number; connection: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path: "/", agent: false }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("GracefulClose", () => {
  it("answers a request in flight, with Connection: close, and refuses new connections", async () => {
    let answer: () => void = () => undefined;
    const { graceful, port, requestArrived } = await serve((_req, res) => {
      answer = () => res.end("done");
    });
    const inFlight = get(port);
    await requestArrived;
    expect(graceful.pending).toBe(1);
    const closed = graceful.close(60_000);
    await expect(get(port)).rejects.toMatchObject({ code: "ECONNREFUSED" });
    answer();
    expect(await inFlight).toEqual({ status: 200, connection: "close", body: "done" });
    expect(await closed).toEqual({ forced: false });
  });

  it("closes an idle keep-alive socket at once", async () => {
    const { graceful, port } = await serve((_req, res) => res.end("ok"));
    const s = connect(port, "127.0.0.1");
    sockets.push(s);
    const gone = new Promise<void>((r) => s.once("close", () => r()));
    const answered = new Promise<void>((r) => s.once("data", () => r()));
    s.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
    await answered;
    expect(await graceful.close(60_000)).toEqual({ forced: false });
    await gone;
  });

  it("cuts what is still open when the grace runs out", async () => {
    const { graceful, port, requestArrived } = await serve(() => undefined);
    const never = get(port);
    await requestArrived;
    expect(await graceful.close(10)).toEqual({ forced: true });
    await expect(never).rejects.toThrow();
  });
});
