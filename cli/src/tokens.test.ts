/** `paddock token ...`: bad usage without a server, then each subcommand against a small stand-in of /v1/tokens. */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateTokenBody } from "@paddock/contracts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

describe("paddock token: bad usage exits 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["token"], /expected a subcommand: create, ls or revoke/],
    [["token", "frob"], /unknown subcommand "frob"/],
    [["token", "create", "x"], /expected nothing, got "x"/],
    [["token", "create", "--expires", "1y"], /--expires wants a duration/],
    [["token", "create", "--expires", "0s"], /--expires wants a duration/],
    [["token", "create", "--expires", "400d"], /--expires wants a duration/],
    [["token", "create", "--expires"], /--expires needs a value/],
    [["token", "ls", "x"], /expected nothing/],
    [["token", "revoke"], /expected ID/],
    [["token", "revoke", "a", "b"], /expected ID/],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("help with no token needed", async () => {
    for (const argv of [["token", "--help"], ["help", "token"], ["token", "create", "--help"], ["token", "revoke", "-h"]]) {
      const r = await runCli(argv, {});
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/^usage: paddock token/);
    }
  });
});

describe("paddock token against a stand-in gateway", () => {
  const requests: Array<{ method: string; url: string; auth: string | undefined; body: unknown }> = [];
  let server: Server;
  let env: Record<string, string>;
  const info = { id: "tok_1", workspaceId: "default", actor: { id: "dev", kind: "user" }, label: "ci", createdAt: 1_700_000_000_000 };
  beforeAll(async () => {
    server = createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => (text += d.toString()));
      req.on("end", () => {
        const body = text ? (JSON.parse(text) as unknown) : undefined;
        requests.push({ method: req.method ?? "", url: req.url ?? "", auth: req.headers.authorization, body });
        const send = (status: number, v: unknown) => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify(v));
        };
        if (req.method === "POST" && req.url === "/v1/tokens") {
          const parsed = CreateTokenBody.safeParse(body);
          if (!parsed.success) return send(400, { error: { code: "invalid", message: "bad body" } });
          return send(201, { ...info, token: `pdk_${"a".repeat(43)}`, ...(parsed.data.expiresInMs ? { expiresAt: info.createdAt + parsed.data.expiresInMs } : {}) });
        }
        if (req.method === "GET" && req.url === "/v1/tokens") return send(200, { tokens: [info, { ...info, id: "tok_2", label: undefined, expiresAt: info.createdAt + 3_600_000 }] });
        if (req.method === "DELETE" && req.url === "/v1/tokens/tok_1") return send(200, info);
        return send(404, { error: { code: "not_found", message: "token not found" } });
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    env = { PADDOCK_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, PADDOCK_TOKEN: "pdk_caller" };
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
  });

  it("create sends label and expiresInMs, prints the token once on stdout (the record with --json)", async () => {
    const r = await runCli(["token", "create", "--label", "ci", "--expires", "1h"], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`pdk_${"a".repeat(43)}\n`);
    expect(r.stderr).toMatch(/tok_1: store it now/);
    expect(requests.at(-1)).toEqual({ method: "POST", url: "/v1/tokens", auth: "Bearer pdk_caller", body: { label: "ci", expiresInMs: 3_600_000 } });
    const j = await runCli(["token", "create", "--json"], env);
    expect(JSON.parse(j.stdout)).toMatchObject({ id: "tok_1", token: expect.stringMatching(/^pdk_/) });
    expect(requests.at(-1)?.body).toEqual({});
  });

  it("ls prints a table (never values), or JSON", async () => {
    const r = await runCli(["token", "ls"], env);
    expect(r.code).toBe(0);
    expect(r.stdout.split("\n")[0]).toMatch(/^ID\s+LABEL\s+CREATED\s+EXPIRES$/);
    expect(r.stdout).toMatch(/tok_1\s+ci\s+2023-11-14 22:13:20\s+never/);
    expect(r.stdout).toMatch(/tok_2\s+-\s+2023-11-14 22:13:20\s+2023-11-14 23:13:20/);
    expect(JSON.parse((await runCli(["token", "ls", "--json"], env)).stdout)).toHaveLength(2);
  });

  it("revoke prints the id; an unknown one exits 1 with the error", async () => {
    expect(await runCli(["token", "revoke", "tok_1"], env)).toEqual({ code: 0, stdout: "tok_1\n", stderr: "" });
    const r = await runCli(["token", "revoke", "tok_9"], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/not_found/);
  });
});
