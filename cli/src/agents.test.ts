/**
 * `paddock agents ID [--resolve PID [--pid-namespace NS]] [--json]` (issue 26,
 * item 8): bad usage exits 2 without asking a server; against the fake
 * gateway, the table (state, pid, runtime, model, turn, tokens, lineage), the
 * API's JSON, a resolve, and a 404 as a clear message with exit 1.
 */
import { describe, expect, it } from "vitest";
import { makeAgent } from "./testing/fake-agents.ts";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

describe("paddock agents: bad usage exits 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["agents"], /paddock agents: expected ID, got nothing/],
    [["agents", "s1", "s2"], /expected ID, got "s1" "s2"/],
    [["agents", "s1", "--all"], /unknown flag --all/],
    [["agents", "s1", "--json=1"], /takes no value/],
    [["agents", "s1", "--resolve"], /flag --resolve needs a value/],
    [["agents", "s1", "--resolve", "abc"], /--resolve "abc": .*pid.*must be a process id/],
    [["agents", "s1", "--resolve", "0"], /--resolve "0": .*pid/],
    [["agents", "s1", "--resolve", "-5"], /--resolve "-5": .*pid/],
    [["agents", "s1", "--resolve", "1.5"], /--resolve "1.5": .*pid/],
    [["agents", "s1", "--resolve", "99999999"], /--resolve "99999999": .*pid/],
    [["agents", "s1", "--resolve="], /--resolve "": .*pid/],
    [["agents", "s1", "--resolve", "5", "--pid-namespace", "nope"], /--pid-namespace "nope": .*pidNamespace.*inode/],
    [["agents", "s1", "--resolve", "5", "--pid-namespace", "pid:[x]"], /pidNamespace/],
    [["agents", "s1", "--pid-namespace", "pid:[1]"], /--pid-namespace goes with --resolve PID/],
    [["agents", "--resolve", "5"], /expected ID, got nothing/],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("a missing token is a usage error", async () => {
    const r = await runCli(["agents", "s1"], { PADDOCK_URL: "http://127.0.0.1:9" });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
  });

  it("help, with no token needed; the top help lists it", async () => {
    for (const argv of [["agents", "--help"], ["agents", "-h"], ["help", "agents"], ["agents", "--bogus", "-h"]]) {
      const r = await runCli(argv, {});
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/^usage: paddock agents ID \[--json\]\n {7}paddock agents ID --resolve PID \[--pid-namespace NS\] \[--json\]\n/);
    }
    expect((await runCli(["--help"], {})).stdout).toMatch(/^ {2}agents +list a session's agents, or find the one owning a process$/m);
  });
});

describe("paddock agents against the fake gateway", () => {
  const { gw, env } = useFakeGateway();

  async function createSession(): Promise<string> {
    const res = await fetch(`${gw.url}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.token}`, "content-type": "application/json" },
      body: JSON.stringify({ spec: { cmd: ["x"] } }),
    });
    return ((await res.json()) as { id: string }).id;
  }

  /** A lineage: agt_a parked and resumed by agt_b (busy in its 3rd turn), and a gone one without a model. */
  async function seeded(): Promise<string> {
    const id = await createSession();
    gw.agents.bySession.set(id, [
      makeAgent({ id: "agt_a", pid: 12, pidNamespace: "pid:[4026532301]", model: "m1", state: "parked", parkedAt: 1_700_000_000_500, successorId: "agt_b", turn: { state: "done", count: 2 }, usage: { tokens: 300 } }),
      makeAgent({ id: "agt_b", pid: 40, pidNamespace: "pid:[4026532302]", model: "m2", predecessorId: "agt_a", turn: { state: "busy", count: 3 }, usage: { tokens: 1234 } }),
      makeAgent({ id: "agt_c", pid: 7, runtime: "codex", state: "gone" }),
    ]);
    return id;
  }

  it("prints ID STATE PID RUNTIME MODEL TURN TOKENS PREDECESSOR SUCCESSOR", async () => {
    const id = await seeded();
    const r = await runCli(["agents", id], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split("\n")).toEqual([
      "ID     STATE   PID  RUNTIME   MODEL  TURN     TOKENS  PREDECESSOR  SUCCESSOR",
      "agt_a  parked  12   stand-in  m1     done/2   300     -            agt_b",
      "agt_b  live    40   stand-in  m2     busy/3   1234    agt_a        -",
      "agt_c  gone    7    codex     -      ready/0  0       -            -",
      "",
    ]);
    expect(gw.requests.at(-1)?.path).toBe(`/v1/sessions/${id}/agents`);
  });

  it("with no agents prints the header only; --json prints the API's answer", async () => {
    const empty = await createSession();
    expect(await runCli(["agents", empty], env)).toEqual({ code: 0, stdout: "ID  STATE  PID  RUNTIME  MODEL  TURN  TOKENS  PREDECESSOR  SUCCESSOR\n", stderr: "" });
    expect(JSON.parse((await runCli(["agents", empty, "--json"], env)).stdout)).toEqual({ agents: [] });
    const id = await seeded();
    const r = await runCli(["agents", "--json", id], env);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ agents: gw.agents.bySession.get(id) });
  });

  it("lists what was declared through the API (a claim declared again replaces it)", async () => {
    const id = await createSession();
    const declare = (body: unknown) =>
      fetch(`${gw.url}/v1/sessions/${id}/agents`, { method: "POST", headers: { authorization: `Bearer ${gw.token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    expect((await declare({ pid: 9, pidNamespace: "pid:[77]", runtime: "stand-in", model: "m1" })).status).toBe(201);
    expect((await declare({ pid: 9, pidNamespace: 77, runtime: "stand-in", model: "m2" })).status).toBe(200);
    expect((await declare({ pid: 0, runtime: "x" })).status).toBe(400);
    const [agent] = (JSON.parse((await runCli(["agents", id, "--json"], env)).stdout) as { agents: Array<Record<string, unknown>> }).agents;
    expect(agent).toMatchObject({ pid: 9, pidNamespace: 77, model: "m2", state: "live", turn: { state: "ready", count: 0 } });
    expect(agent?.redeclaredAt).toBeDefined();
  });

  it("--resolve prints the owning agent (key: value, or its JSON), sending pid and pidNamespace", async () => {
    const id = await seeded();
    gw.agents.owners.set(`${id}/41`, "agt_b");
    const own = await runCli(["agents", id, "--resolve", "40"], env);
    expect(own.code, own.stderr).toBe(0);
    expect(own.stdout).toMatch(/^id: +agt_b$/m);
    expect(own.stdout).toMatch(/^predecessorId: +agt_a$/m);
    expect(own.stdout).toMatch(/^turn: +\{"state":"busy","count":3\}$/m);
    const child = await runCli(["agents", id, "--resolve=41", "--pid-namespace", "pid:[4026532302]", "--json"], env);
    expect(child.code, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual(gw.agents.bySession.get(id)?.[1]);
    const inode = await runCli(["agents", id, "--resolve", "41", "--pid-namespace", "4026532302", "--json"], env);
    expect(JSON.parse(inode.stdout)).toMatchObject({ id: "agt_b" });
    const asked = gw.requests.filter((r) => r.path.includes("/agents/resolve")).map((r) => Object.fromEntries(new URL(r.path, gw.url).searchParams));
    expect(asked).toEqual([{ pid: "40" }, { pid: "41", pidNamespace: "pid:[4026532302]" }, { pid: "41", pidNamespace: "4026532302" }]);
  });

  it("a process no agent owns: a clear message on stderr, exit 1, nothing on stdout", async () => {
    const id = await seeded();
    // A parked or gone agent owns nothing; another namespace is another process.
    for (const argv of [["--resolve", "12"], ["--resolve", "7"], ["--resolve", "999"], ["--resolve", "40", "--pid-namespace", "pid:[1]"]]) {
      const r = await runCli(["agents", id, ...argv], env);
      expect({ argv, ...r }).toEqual({ argv, code: 1, stdout: "", stderr: `error: not_found: no agent owns process ${argv[1] ?? ""} in session ${id} (agent owning that process not found)\n` });
    }
    expect(await runCli(["agents", "nope", "--resolve", "40"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: no agent owns process 40 in session nope (session not found)\n" });
  });

  it("API errors print error: code: message and exit 1", async () => {
    expect(await runCli(["agents", "nope"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: session not found\n" });
    expect(await runCli(["agents", "a.b"], env)).toMatchObject({ code: 1, stdout: "", stderr: expect.stringMatching(/^error: invalid: /) as unknown });
    expect(await runCli(["agents", "s1"], { ...env, PADDOCK_TOKEN: "wrong" })).toEqual({ code: 1, stdout: "", stderr: "error: unauthenticated: missing or invalid token\n" });
  });
});
