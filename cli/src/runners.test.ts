/** `paddock runners` and `paddock runner ...`: bad usage without a server, then each against the fake gateway. */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startFakeGateway, type FakeGateway } from "./testing/fake-gateway.ts";
import { makeRunner } from "./testing/fake-runners.ts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

describe("paddock runner(s): bad usage exits 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["runner"], /expected a subcommand: drain, cordon, uncordon, get, join-token or revoke/],
    [["runner", "join-token"], /--pool is required/],
    [["runner", "join-token", "--pool", "p", "--ttl-ms", "soon"], /must be a positive integer/],
    [["runner", "join-token", "--pool", "p", "extra"], /expected nothing, got "extra"/],
    [["runner", "revoke"], /paddock runner revoke: expected ID/],
    [["runner", "revoke", "a", "b"], /expected ID/],
    [["runner", "reboot", "r1"], /unknown subcommand "reboot"/],
    [["runner", "--json"], /unknown subcommand "--json"/],
    [["runner", "drain"], /paddock runner drain: expected ID, got nothing/],
    [["runner", "drain", "r1", "r2"], /expected ID, got "r1" "r2"/],
    [["runner", "drain", "r1", "--force"], /unknown flag --force/],
    [["runner", "drain", "r1", "--json=yes"], /takes no value/],
    [["runner", "drain", "-x", "r1"], /unknown flag -x/],
    [["runner", "cordon"], /paddock runner cordon: expected ID/],
    [["runner", "cordon", "a", "b"], /expected ID/],
    [["runner", "uncordon"], /paddock runner uncordon: expected ID/],
    [["runner", "uncordon", "r1", "--state", "active"], /unknown flag --state/],
    [["runner", "get"], /paddock runner get: expected ID/],
    [["runner", "get", "a", "b"], /expected ID/],
    [["runners", "r1"], /paddock runners: expected nothing, got "r1"/],
    [["runners", "--all"], /unknown flag --all/],
    [["runners", "--json=1"], /takes no value/],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("a missing token is a usage error", async () => {
    const r = await runCli(["runner", "drain", "r1"], { PADDOCK_URL: "http://127.0.0.1:9" });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
  });

  it("help for runners, runner and each subcommand, with no token needed", async () => {
    for (const argv of [["runners", "--help"], ["runner", "--help"], ["runner", "-h"], ["help", "runner"]]) {
      const r = await runCli(argv, {});
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/^usage: paddock runners? /);
    }
    for (const sub of ["drain", "cordon", "uncordon", "get"]) {
      const r = await runCli(["runner", sub, "--help"], {});
      expect(r.code, sub).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^usage: paddock runner ${sub} ID \\[--json\\]`));
      // --help wins even next to a bad flag or missing ID.
      expect((await runCli(["runner", sub, "--bogus", "-h"], {})).code).toBe(0);
    }
    const top = (await runCli(["--help"], {})).stdout;
    expect(top).toMatch(/^ {2}runners +list runners$/m);
    expect(top).toMatch(/^ {2}runner +administer one runner/m);
  });
});

describe("against the fake gateway", () => {
  let gw: FakeGateway;
  let env: Record<string, string>;
  beforeEach(async () => {
    gw = await startFakeGateway();
    env = { PADDOCK_URL: gw.url, PADDOCK_TOKEN: gw.token };
    gw.runners.set("r1", makeRunner({ id: "r1", capacityUsed: 1, capabilities: ["gpu", "kvm"], resources: { cpuMillis: 2000, memoryBytes: 1024, diskBytes: 2048 } }));
    gw.runners.set("r2", makeRunner({ id: "r2", poolId: "big", state: "lost", lostReason: "lease expired", lastSeenAt: 1_700_000_060_000 }));
  });
  afterEach(async () => {
    await gw.close();
  });

  const posts = () => gw.requests.filter((r) => r.method === "POST").map((r) => [r.path, r.body]);

  it("runners prints ID POOL STATE USED/TOTAL CAPABILITIES LAST-SEEN, walking every page", async () => {
    gw.pageSize = 1;
    const r = await runCli(["runners"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split("\n")).toEqual([
      "ID  POOL     STATE   USED/TOTAL  CAPABILITIES  LAST-SEEN",
      "r1  default  active  1/4         gpu,kvm       2023-11-14 22:13:20",
      "r2  big      lost    0/4         -             2023-11-14 22:14:20",
      "",
    ]);
    expect(gw.requests.map((q) => q.path)).toEqual(["/v1/runners?limit=500", "/v1/runners?limit=500&cursor=1"]);
  });

  it("runners with no runners prints the header only; --json prints the records", async () => {
    const all = JSON.parse((await runCli(["runners", "--json"], env)).stdout) as unknown[];
    expect(all).toEqual([...gw.runners.values()]);
    gw.runners.clear();
    expect(await runCli(["runners"], env)).toEqual({ code: 0, stdout: "ID  POOL  STATE  USED/TOTAL  CAPABILITIES  LAST-SEEN\n", stderr: "" });
    expect((await runCli(["runners", "--json"], env)).stdout).toBe("[]\n");
  });

  it("drain, cordon and uncordon POST {} and print ID STATE", async () => {
    expect(await runCli(["runner", "drain", "r1"], env)).toEqual({ code: 0, stdout: "r1 draining\n", stderr: "" });
    expect(await runCli(["runner", "cordon", "r1"], env)).toEqual({ code: 0, stdout: "r1 cordoned\n", stderr: "" });
    expect(await runCli(["runner", "uncordon", "r1"], env)).toEqual({ code: 0, stdout: "r1 active\n", stderr: "" });
    expect(posts()).toEqual([
      ["/v1/runners/r1/drain", {}],
      ["/v1/runners/r1/cordon", {}],
      ["/v1/runners/r1/uncordon", {}],
    ]);
    expect(gw.runners.get("r1")?.state).toBe("active");
  });

  it("--json prints the runner record", async () => {
    const r = await runCli(["runner", "cordon", "--json", "r1"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ ...makeRunner({ id: "r1" }), ...gw.runners.get("r1"), state: "cordoned" });
  });

  it("runner get prints key: value lines, or the record with --json", async () => {
    const r = await runCli(["runner", "get", "r2"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^state: +lost$/m);
    expect(r.stdout).toMatch(/^lostReason: +lease expired$/m);
    expect(r.stdout).toMatch(/^lastSeenAt: +2023-11-14 22:14:20 \(1700000060000\)$/m);
    expect(JSON.parse((await runCli(["runner", "get", "r1", "--json"], env)).stdout)).toEqual(gw.runners.get("r1"));
  });

  it("ids are sent path-encoded", async () => {
    await runCli(["runner", "drain", "a/b c"], env);
    expect(posts()).toEqual([["/v1/runners/a%2Fb%20c/drain", {}]]);
  });

  it("API errors print error: code: message and exit 1", async () => {
    expect(await runCli(["runner", "drain", "nope"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: runner not found\n" });
    expect(await runCli(["runner", "get", "nope"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: runner not found\n" });
    gw.admin = false;
    expect(await runCli(["runner", "cordon", "r1"], env)).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: forbidden: runner.set_state needs a workspace admin\n",
    });
    expect(gw.runners.get("r1")?.state).toBe("active");
    expect(await runCli(["runner", "uncordon", "r1"], { ...env, PADDOCK_TOKEN: "wrong" })).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: unauthenticated: missing or invalid token\n",
    });
  });

  it("an answer that breaks the contract is reported, not printed", async () => {
    gw.runners.set("r3", { ...makeRunner({ id: "r3" }), capacityUsed: -1 }); // a fixture parses; a broken answer is built past it
    const r = await runCli(["runner", "drain", "r3"], env);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^error: internal: POST \/v1\/runners\/r3\/drain: unexpected answer: capacityUsed/);
    gw.runners.delete("r3");
    gw.runners.set("r4", { ...makeRunner({ id: "r4" }), state: "sleeping" } as never);
    expect((await runCli(["runners"], env)).stderr).toMatch(/^error: internal: GET \/v1\/runners: unexpected answer: runners\.2\.state/);
  });
});
