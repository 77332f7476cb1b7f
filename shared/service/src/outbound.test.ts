/**
 * The outbound guard: which addresses a user-chosen URL may reach, judged on
 * literals, on every answer of a name, and again on the address a
 * connection is actually made to (a real request through guardedLookup).
 */
import { createServer, get, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkOutboundTarget, guardedLookup, isPublicAddress, PrivateTargetError } from "./outbound.ts";

let server: Server;
let port = 0;
beforeAll(async () => {
  server = createServer((_req, res) => res.end("reached"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function fetchThrough(host: string, allowPrivate: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get({ host, port, path: "/", lookup: guardedLookup(allowPrivate) as never }, (res) => {
      let text = "";
      res.on("data", (c: Buffer) => (text += c.toString()));
      res.on("end", () => resolve(text));
    });
    req.on("error", reject);
  });
}

describe("the outbound guard", () => {
  it("judges addresses: public unicast passes; loopback, private, link-local, CGNAT, multicast, documentation and mapped ones do not", () => {
    for (const ip of ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"]) expect([ip, isPublicAddress(ip)]).toEqual([ip, true]);
    const refused = ["127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "192.0.2.1", "::1", "::", "fe80::1", "fd00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "not-an-ip"];
    for (const ip of refused) expect([ip, isPublicAddress(ip)]).toEqual([ip, false]);
  });

  it("refuses a URL whose host is, or resolves to, a refused address, unless private targets are allowed", async () => {
    for (const url of ["http://127.0.0.1/", "http://localhost:8080/x", "http://[::1]/", "http://10.0.0.1/", "http://169.254.169.254/latest"]) {
      await expect(checkOutboundTarget(url, false)).rejects.toBeInstanceOf(PrivateTargetError);
      await expect(checkOutboundTarget(url, true)).resolves.toBeUndefined();
    }
    await expect(checkOutboundTarget("http://93.184.215.14/", false)).resolves.toBeUndefined();
    await expect(checkOutboundTarget("http://name.invalid/", false)).rejects.toBeInstanceOf(PrivateTargetError);
  });

  it("fails the connection itself when the name resolves to a refused address (a name that changed since it was checked)", async () => {
    await expect(fetchThrough("localhost", false)).rejects.toMatchObject({ code: "EPRIVATE" });
    await expect(fetchThrough("localhost", true)).resolves.toBe("reached");
  });
});
