/**
 * create, suspend, resume, snapshot, recycle and restart: bad usage without a
 * server, then each command against the in-process fake gateway.
 */
import { describe, expect, it } from "vitest";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

describe("bad usage exits 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["create", "ls"], /put the command after --/],
    [["create", "--"], /no command after --/],
    [["create", "--mode", "forever", "--", "x"], /--mode must be run or watch/],
    [["create", "--name", "has space", "--", "x"], /name/],
    [["create", "--env", "a.b"], /environmentId/],
    [["create", "--parent"], /--parent needs a value/],
    [["create", "--one-shot=yes"], /takes no value/],
    [["create", "--idempotency-key", ""], /idempotencyKey/],
    [["create", "--timeout-ms", "5", "--", "x"], /--timeout-ms applies only with --wait/],
    [["create", "--wait", "--timeout-ms", "soon", "--", "x"], /--timeout-ms must be a number of ms/],
    [["create", "--wait", "--timeout-ms", "300001", "--", "x"], /--timeout-ms must be a number of ms/],
    [["create", "--wait=yes", "--", "x"], /takes no value/],
    [["suspend"], /expected ID/],
    [["suspend", "a", "b"], /expected ID/],
    [["suspend", "a", "--cold"], /unknown flag --cold/],
    [["suspend", "a", "--warm=false"], /takes no value/],
    [["resume"], /expected ID/],
    [["snapshot", "a", "b"], /expected ID/],
    [["recycle"], /expected ID/],
    [["restart", "a"], /expected ID APP/],
    [["restart", "a", "b", "c"], /expected ID APP/],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("every new command has --help, with no token needed", async () => {
    for (const name of ["create", "suspend", "resume", "snapshot", "recycle", "restart"]) {
      const r = await runCli([name, "--help"], {});
      expect(r.code, name).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^usage: paddock ${name}`));
    }
    expect((await runCli(["--help"], {})).stdout).toMatch(/^ {2}suspend +suspend a session/m);
  });
});

describe("against the fake gateway", () => {
  const { gw, env } = useFakeGateway();

  const posts = () => gw.requests.filter((r) => r.method === "POST").map((r) => [r.path, r.body]);

  it("create sends every flag and prints the id, or the record with --json", async () => {
    const r = await runCli(
      ["create", "--name", "job", "--env", "env1", "--one-shot", "--parent", "p1", "--mode", "watch", "--idempotency-key", "k1", "--", "sh", "-c", "x"],
      env,
    );
    expect(r).toEqual({ code: 0, stdout: "s1\n", stderr: "" });
    expect(posts()).toEqual([
      [
        "/v1/sessions",
        { name: "job", environmentId: "env1", oneShot: true, parentId: "p1", mode: "watch", idempotencyKey: "k1", spec: { cmd: ["sh", "-c", "x"] } },
      ],
    ]);
    // The same key again is an idempotent replay: the same session.
    const again = await runCli(["create", "--idempotency-key", "k1", "--json", "--", "other"], env);
    expect(JSON.parse(again.stdout)).toMatchObject({ id: "s1", name: "job", oneShot: true, mode: "watch", parentId: "p1" });
    expect(gw.attaches).toEqual([]);
  });

  it("create --wait asks the gateway to answer once the session runs (?wait=running, with --timeout-ms)", async () => {
    expect(await runCli(["create", "--wait", "--timeout-ms", "5000", "--", "x"], env)).toEqual({ code: 0, stdout: "s1\n", stderr: "" });
    expect(gw.requests.filter((r) => r.method === "POST").map((r) => r.path)).toEqual(["/v1/sessions?wait=running&timeoutMs=5000"]);
  });

  it("create without a command sends an empty spec (the environment's, or a shell)", async () => {
    expect((await runCli(["create", "--env", "env1"], env)).stdout).toBe("s1\n");
    expect(posts()).toEqual([["/v1/sessions", { environmentId: "env1", spec: {} }]]);
  });

  it("suspend is cold by default, --warm keeps it warm; resume; each prints ID STATE or --json", async () => {
    await runCli(["create", "--", "x"], env);
    await runCli(["create", "--", "y"], env);
    expect(await runCli(["suspend", "s1"], env)).toEqual({ code: 0, stdout: "s1 suspended_cold\n", stderr: "" });
    expect(await runCli(["suspend", "s2", "--warm"], env)).toEqual({ code: 0, stdout: "s2 suspended_warm\n", stderr: "" });
    expect(posts().slice(2)).toEqual([
      ["/v1/sessions/s1/suspend", { warm: false }],
      ["/v1/sessions/s2/suspend", { warm: true }],
    ]);
    expect(await runCli(["resume", "s2"], env)).toEqual({ code: 0, stdout: "s2 running\n", stderr: "" });
    expect(JSON.parse((await runCli(["resume", "s1", "--json"], env)).stdout)).toMatchObject({ id: "s1", state: "queued" });
  });

  it("a runner slower than the API's wait: suspend and resume print the state once it is done, or its refusal", async () => {
    await runCli(["create", "--", "x"], env);
    await runCli(["create", "--", "y"], env);
    gw.slowRunner = { reads: 2 };
    expect(await runCli(["suspend", "s1"], env)).toEqual({ code: 0, stdout: "s1 suspended_cold\n", stderr: "" });
    expect(await runCli(["suspend", "s2", "--warm"], env)).toEqual({ code: 0, stdout: "s2 suspended_warm\n", stderr: "" });
    expect(JSON.parse((await runCli(["resume", "s2", "--json"], env)).stdout)).toMatchObject({ id: "s2", state: "running" });
    // Each waited through the reads that still showed it pending.
    expect(gw.requests.filter((r) => r.method === "GET" && r.path === "/v1/sessions/s1")).toHaveLength(3);
    gw.slowRunner = { reads: 1, refuse: "checkpoint could not be stored" };
    expect(await runCli(["suspend", "s2"], env)).toEqual({ code: 1, stdout: "", stderr: "error: conflict: the runner refused: checkpoint could not be stored\n" });
  });

  it("a snapshot slower than the API's wait (202) is waited for on its request until taken, or printed refused", async () => {
    await runCli(["create", "--", "x"], env);
    gw.slowRunner = { reads: 2 };
    expect(await runCli(["snapshot", "s1"], env)).toEqual({ code: 0, stdout: "checkpoints/default/s1-1\n", stderr: "" });
    // The POST, then three waits on the request it named: two still pending, the third the checkpoint.
    expect(gw.requests.filter((r) => r.path === "/v1/sessions/s1/snapshots/req_1").map((r) => r.method)).toEqual(["GET", "GET", "GET"]);
    gw.slowRunner = { reads: 0, refuse: "no space left for the checkpoint" };
    expect(await runCli(["snapshot", "s1"], env)).toEqual({ code: 1, stdout: "", stderr: "error: conflict: the runner refused: no space left for the checkpoint\n" });
  });

  it("an API error is printed as error: code: message, exit 1", async () => {
    await runCli(["create", "--", "x"], env);
    expect(await runCli(["resume", "s1"], env)).toEqual({ code: 1, stdout: "", stderr: "error: conflict: session is running\n" });
    expect(await runCli(["suspend", "nope"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: session not found\n" });
    expect(await runCli(["snapshot", "s1"], { ...env, PADDOCK_TOKEN: "wrong" })).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: unauthenticated: missing or invalid token\n",
    });
  });

  it("snapshot prints the ref, or the checkpoint with --json", async () => {
    await runCli(["create", "--", "x"], env);
    expect(await runCli(["snapshot", "s1"], env)).toEqual({ code: 0, stdout: "checkpoints/default/s1-1\n", stderr: "" });
    expect(JSON.parse((await runCli(["snapshot", "s1", "--json"], env)).stdout)).toEqual({
      ref: "checkpoints/default/s1-1",
      format: "tar+gzip",
      capabilities: ["portable"],
    });
  });

  it("recycle prints the new id, or {released, session} with --json", async () => {
    await runCli(["create", "--", "x"], env);
    expect(await runCli(["recycle", "s1"], env)).toEqual({ code: 0, stdout: "s2\n", stderr: "" });
    const j = JSON.parse((await runCli(["recycle", "s2", "--json"], env)).stdout) as { released: { id: string; state: string }; session: { id: string } };
    expect(j.released).toMatchObject({ id: "s2", state: "destroyed" });
    expect(j.session.id).toBe("s3");
  });

  it("restart prints the app's new generation; an unknown app is not_found", async () => {
    await runCli(["create", "--", "x"], env);
    expect(await runCli(["restart", "s1", "main"], env)).toEqual({ code: 0, stdout: "s1 main generation 2\n", stderr: "" });
    expect(JSON.parse((await runCli(["restart", "s1", "main", "--json"], env)).stdout)).toMatchObject({ apps: { main: { generation: 3 } } });
    expect(posts().slice(1)[0]).toEqual(["/v1/sessions/s1/apps/main/restart", {}]);
    expect(await runCli(["restart", "s1", "web"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: app not found\n" });
    // A runner slower than the wait: the old generation is not printed as if it were the new one.
    gw.restartPending = true;
    expect(await runCli(["restart", "s1", "main"], env)).toEqual({ code: 0, stdout: "s1 main restart pending\n", stderr: "" });
  });
});
