import { once } from "node:events";
import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UnavailableError } from "@paddock/contracts";
import { copyExactly } from "./data-plane.ts";

/** A runner's side that sends what the test says, then ends. */
let runner: Server;
let send = "";

beforeAll(async () => {
  runner = createServer((s) => s.end(send));
  await new Promise<void>((resolve) => runner.listen(0, "127.0.0.1", resolve));
});
afterAll(async () => {
  await new Promise<void>((resolve) => runner.close(() => resolve()));
});

async function socketSending(text: string): Promise<Socket> {
  send = text;
  const s = connect({ host: "127.0.0.1", port: (runner.address() as AddressInfo).port });
  await once(s, "connect");
  return s;
}

describe("a file's bytes from the data plane", () => {
  it("are copied whole and the answer ended when the runner sends exactly the length", async () => {
    const out = new PassThrough();
    const got: Buffer[] = [];
    out.on("data", (b: Buffer) => got.push(b));
    await copyExactly(await socketSending("0123456789"), out, 10);
    expect(Buffer.concat(got).toString()).toBe("0123456789");
    expect(out.writableEnded).toBe(true);
  });

  it.each([
    ["fewer", "01234", 10],
    ["more", "0123456789ab", 10],
  ] as const)("cut the answer (destroyed, never ended) when the runner sends %s bytes", async (_what, text, length) => {
    const out = new PassThrough();
    out.resume();
    const err = await copyExactly(await socketSending(text), out, length).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnavailableError);
    expect(out.destroyed).toBe(true);
    expect(out.writableFinished).toBe(false);
  });
});
