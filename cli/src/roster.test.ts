/**
 * `paddock ls --parent ID --creator ID` (issue 26, item 6) against the fake
 * gateway: the filters reach the API as query parameters; a flag without its
 * value is a usage error (exit 2); a malformed id is the gateway's `invalid`
 * (exit 1), as with `events --session`.
 */
import { describe, expect, it } from "vitest";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { runCli } from "./testing/run-cli.ts";

const { gw, env } = useFakeGateway();

async function createWith(body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${gw.url}/v1/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.token}`, "content-type": "application/json" },
    body: JSON.stringify({ spec: { cmd: ["x"] }, ...body }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

const listed = async (argv: string[]) => {
  const r = await runCli(["ls", "--json", ...argv], env);
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as Array<{ id: string }>).map((s) => s.id);
};

describe("ls --parent, --creator", () => {
  it("send parentId and creatorId and print what the API lists", async () => {
    const parent = await createWith({});
    const child = await createWith({ parentId: parent });
    await createWith({});
    expect(await listed(["--parent", parent])).toEqual([child]);
    expect(await listed([`--parent=${parent}`, "--creator", "dev", "--all"])).toEqual([child]);
    expect(await listed(["--creator", "nobody"])).toEqual([]);
    const asked = gw.requests.filter((r) => r.method === "GET" && r.path.startsWith("/v1/sessions?")).map((r) => new URL(r.path, gw.url).searchParams);
    expect(Object.fromEntries(asked[1] ?? [])).toMatchObject({ parentId: parent, creatorId: "dev", includeTerminal: "true" });
    // Without the flags, neither parameter is sent.
    await listed([]);
    const last = gw.requests.filter((r) => r.path.startsWith("/v1/sessions?")).at(-1)?.path ?? "";
    expect(last).not.toMatch(/parentId|creatorId/);
  });

  it("a flag without its value, or a stray argument, is a usage error (exit 2) and asks nothing", async () => {
    const before = gw.requests.length;
    for (const argv of [["ls", "--parent"], ["ls", "--creator"], ["ls", "--parent", "--"], ["ls", "--creator", "dev", "extra"], ["ls", "--parents", "x"]]) {
      const r = await runCli(argv, env);
      expect(r.code, argv.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
    }
    expect(gw.requests.length).toBe(before);
  });

  it("a malformed id is the gateway's invalid (exit 1)", async () => {
    for (const argv of [["ls", "--parent", "a.b"], ["ls", "--creator", "../x"], ["ls", "--creator", "x".repeat(65)], ["ls", "--parent="]]) {
      const r = await runCli(argv, env);
      expect(r.code, argv.join(" ")).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^error: invalid: /);
    }
  });

  it("--help names both flags", async () => {
    const help = (await runCli(["ls", "--help"], env)).stdout;
    expect(help).toMatch(/--parent ID/);
    expect(help).toMatch(/--creator ID/);
  });
});
