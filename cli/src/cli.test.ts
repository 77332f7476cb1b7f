/**
 * The CLI against an in-process fake of the public API (testing/fake-gateway.ts):
 * the attach protocol, reconnects, pagination and error mapping, with no stack.
 */
import { describe, expect, it } from "vitest";
import type { AuditEvent } from "@paddock/contracts";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { FakeTtyStdin, runCli, startCli } from "./testing/run-cli.ts";

const { gw, env } = useFakeGateway();

describe("run", () => {
  it("creates the session, prints its output from the start and exits with its code", async () => {
    gw.onAttach = (t) => {
      t.emit("hi");
      t.exit(3);
    };
    const r = await runCli(["run", "--name", "job1", "--", "sh", "-c", "printf hi; exit 3"], env);
    expect(r).toEqual({ code: 3, stdout: "hi", stderr: "" });
    const t = gw.terminals.get("s1");
    expect(t?.session.spec).toEqual({ cmd: ["sh", "-c", "printf hi; exit 3"] });
    expect(t?.session.name).toBe("job1");
    expect(Object.fromEntries(gw.attaches[0] ?? [])).toEqual({ mode: "controller", since: "all" });
  });

  it("a command that ended before the controller attach is replayed as a viewer", async () => {
    gw.program.start = (t) => {
      t.emit("hi");
      t.exit(3);
    };
    const r = await runCli(["run", "--", "sh", "-c", "printf hi; exit 3"], env);
    expect(r).toEqual({ code: 3, stdout: "hi", stderr: "" });
    expect(gw.attaches.map((q) => Object.fromEntries(q))).toEqual([{ mode: "viewer", since: "all" }]);
  });

  it("forwards stdin that is not a TTY to the command", async () => {
    gw.program.input = (t, bytes) => {
      t.emit(`got:${bytes.toString()}`);
      t.exit(0);
    };
    const cli = startCli(["run", "--", "cat"], env);
    cli.stdin.write("ping");
    expect(await cli.code).toBe(0);
    expect(cli.stdout.text()).toBe("got:ping");
  });

  it("stdin EOF leaves the session running", async () => {
    gw.onAttach = (t) => t.emit("ready");
    const cli = startCli(["run", "--", "cat"], env);
    cli.stdin.end();
    await cli.stdout.waitFor("ready");
    const t = gw.terminals.get("s1");
    expect(t?.exitCode).toBeUndefined();
    t?.emit(" later");
    t?.exit(0);
    expect(await cli.code).toBe(0);
    expect(cli.stdout.text()).toBe("ready later");
  });

  it("--view attaches read-only; -d only prints the id", async () => {
    gw.program.start = (t) => t.exit(0);
    expect((await runCli(["run", "--view", "--", "true"], env)).code).toBe(0);
    expect(gw.attaches[0]?.get("mode")).toBe("viewer");
    expect(await runCli(["run", "-d", "--", "true"], env)).toEqual({ code: 0, stdout: "s2\n", stderr: "" });
    expect(gw.attaches).toHaveLength(1);
  });

  it("a terminal that closes without an exit frame reports the record", async () => {
    gw.onAttach = (t, ws) => {
      t.session.state = "failed";
      t.session.error = "could not start the sandbox";
      ws.close(4000, "ended");
    };
    const r = await runCli(["run", "--", "nope"], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/session s1 is failed: could not start the sandbox/);
  });
});

describe("attach", () => {
  it("input piped while reconnecting is held, not dropped: stdin waits past the high-water mark and every byte arrives in order", async () => {
    const size = 4 * 1024 * 1024;
    const sent = Buffer.alloc(size);
    for (let i = 0; i < size; i++) sent[i] = 97 + (i % 26);
    let received = 0;
    const chunks: Buffer[] = [];
    gw.program.input = (t, bytes) => {
      chunks.push(Buffer.from(bytes));
      received += bytes.byteLength;
      if (received === size) t.exit(0);
    };
    gw.onAttach = (_t, ws, n) => {
      if (n === 1) ws.terminate();
    };
    const cli = startCli(["run", "--", "cat"], env);
    // Typed once the CLI knows the connection is gone: all of it waits for the reconnect.
    await cli.stderr.waitFor("reconnecting");
    for (let at = 0; at < size; at += 64 * 1024) cli.stdin.write(sent.subarray(at, at + 64 * 1024));
    expect(await cli.code).toBe(0);
    expect(Buffer.concat(chunks).equals(sent)).toBe(true);
    expect(cli.stderr.text()).not.toMatch(/dropping/);
  });

  it("reconnects after a lost connection from the last cursor, losing and repeating nothing", async () => {
    gw.program.start = (t) => {
      t.emit("one ");
      t.emit("two ");
    };
    gw.onAttach = (t, ws, n) => {
      if (n === 1) {
        t.emit("three ");
        ws.terminate(); // abnormal close 1006
      } else {
        t.emit("four");
        t.exit(5);
      }
    };
    await runCli(["run", "-d", "--", "x"], env);
    const r = await runCli(["attach", "s1", "--since", "all"], env);
    expect(r.stdout).toBe("one two three four");
    expect(r.code).toBe(5);
    expect(r.stderr).toMatch(/connection lost .*reconnecting from cursor 3/);
    expect(gw.attaches.map((q) => q.get("since"))).toEqual(["all", "3"]);
  });

  it("a controller that lost its connection while the app ended resumes as a viewer from its cursor", async () => {
    gw.onAttach = (t, ws, n) => {
      if (n !== 1) return;
      t.emit("a ");
      ws.terminate();
      t.emit("b");
      t.exit(4);
    };
    const r = await runCli(["run", "--", "x"], env);
    expect(r.stdout).toBe("a b");
    expect(r.code).toBe(4);
    expect(gw.attaches.map((q) => [q.get("mode"), q.get("since")])).toEqual([
      ["controller", "all"],
      ["viewer", "1"],
    ]);
  });

  it("starts from the screen by default and can attach as a viewer of one app", async () => {
    gw.program.start = (t) => t.emit("screen");
    gw.onAttach = (t) => t.exit(0);
    await runCli(["run", "-d", "--", "x"], env);
    const r = await runCli(["attach", "s1", "--view", "--app", "main"], env);
    expect(r).toEqual({ code: 0, stdout: "screen", stderr: "" });
    expect(Object.fromEntries(gw.attaches[0] ?? [])).toEqual({ app: "main", mode: "viewer", since: "screen" });
  });

  it("a superseded controller prints why and exits 1", async () => {
    await runCli(["run", "-d", "--", "x"], env);
    gw.onAttach = (t) => t.emit(`gen${String(t.session.controllerGeneration)} `);
    const first = startCli(["attach", "s1"], env);
    await first.stdout.waitFor("gen1");
    const second = startCli(["attach", "s1"], env);
    expect(await first.code).toBe(1);
    expect(first.stderr.text()).toMatch(/another controller attached/);
    await second.stdout.waitFor("gen2");
    gw.terminals.get("s1")?.exit(0);
    expect(await second.code).toBe(0);
  });

  it("on a TTY: raw mode, the window size, and Ctrl-] detaches leaving the session running", async () => {
    await runCli(["run", "-d", "--", "x"], env);
    gw.onAttach = (t) => t.emit("$ ");
    const cli = startCli(["attach", "s1"], env, { tty: { cols: 120, rows: 40 } });
    await cli.stdout.waitFor("$ ");
    cli.stdin.write("ls\r\x1dignored");
    expect(await cli.code).toBe(0);
    expect(cli.stderr.text()).toMatch(/detached; the session keeps running\. Re-attach with: paddock attach s1/);
    const t = gw.terminals.get("s1");
    expect(Buffer.concat(t?.input ?? []).toString()).toBe("ls\r");
    expect(t?.resizes).toEqual([{ type: "resize", cols: 120, rows: 40 }]);
    expect(t?.exitCode).toBeUndefined();
    expect(cli.stdin instanceof FakeTtyStdin && cli.stdin.rawModes).toEqual([true, false]);
  });

  it("status frames: a suspension and the resume after it are notices on stderr; placement and the end are silent", async () => {
    await runCli(["run", "-d", "--", "x"], env);
    gw.onAttach = (t, ws) => {
      for (const state of ["running", "suspended_warm", "running", "running", "dead"]) ws.send(JSON.stringify({ type: "status", state }));
      t.emit("out");
      t.exit(0);
    };
    const r = await runCli(["attach", "s1", "--view"], env);
    expect(r).toEqual({ code: 0, stdout: "out", stderr: "[paddock] session is now suspended_warm\n[paddock] session resumed (running)\n" });
  });

  it("an unknown session is not_found, exit 1", async () => {
    const r = await runCli(["attach", "nope"], env);
    expect(r).toEqual({ code: 1, stdout: "", stderr: "error: not_found: session not found\n" });
  });
});

describe("records", () => {
  it("ls walks every page; --limit caps; --json is the records", async () => {
    gw.pageSize = 2;
    for (let i = 0; i < 5; i++) await runCli(["run", "-d", "--name", `n${String(i)}`, "--", "x"], env);
    const table = await runCli(["ls"], env);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+NAME\s+STATE\s+RUNNER\s+CREATED$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 4))).toEqual(
      [0, 1, 2, 3, 4].map((i) => [`s${String(i + 1)}`, `n${String(i)}`, "running", "runner-1"]),
    );
    const json = JSON.parse((await runCli(["ls", "--json", "--limit", "3", "--all"], env)).stdout) as Array<{ id: string }>;
    expect(json.map((s) => s.id)).toEqual(["s1", "s2", "s3"]);
  });

  it("get prints key: value lines or JSON; rm prints ids and fails on unknown ones", async () => {
    await runCli(["run", "-d", "--name", "g", "--", "x"], env);
    const human = await runCli(["get", "s1"], env);
    expect(human.stdout).toMatch(/^id: +s1$/m);
    expect(human.stdout).toMatch(/^state: +running$/m);
    expect(human.stdout).toMatch(/^createdAt: +2023-11-14 22:13:20 \(1700000000001\)$/m);
    expect((JSON.parse((await runCli(["get", "s1", "--json"], env)).stdout) as { name: string }).name).toBe("g");
    const rm = await runCli(["rm", "s1", "nope"], env);
    expect(rm.code).toBe(1);
    expect(rm.stdout).toBe("s1\n");
    expect(rm.stderr).toBe("error: not_found: nope: session not found\n");
    expect(gw.terminals.get("s1")?.session.state).toBe("destroyed");
  });

  it("logs prints the log; -f follows until the exit frame", async () => {
    gw.program.start = (t) => t.emit("a\r\nb");
    await runCli(["run", "-d", "--", "x"], env);
    expect(await runCli(["logs", "s1"], env)).toEqual({ code: 0, stdout: "a\r\nb", stderr: "" });
    gw.onAttach = (t) => {
      t.emit("c");
      t.exit(7);
    };
    expect(await runCli(["logs", "-f", "s1"], env)).toEqual({ code: 0, stdout: "a\r\nbc", stderr: "" });
    expect(gw.attaches[0]?.get("mode")).toBe("viewer");
  });

  it("events walk their pages by since; events and runners print tables", async () => {
    gw.pageSize = 1;
    const event = (id: string): AuditEvent => ({
      id,
      workspaceId: "default",
      actorId: "dev",
      action: "create",
      resource: { kind: "session", workspaceId: "default", id: "s1", creatorId: "dev" },
      at: 1_700_000_000_000,
      usage: { cpuTimeSeconds: 0, memoryByteSeconds: 0, storageBytes: 0, networkBytes: 0, agentTokenCount: 0 },
      placementGeneration: 0,
    });
    gw.events.push(event("ev1"), event("ev2"));
    const ev = await runCli(["events", "--session", "s1"], env);
    expect(ev.stdout).toMatch(/^2023-11-14 22:13:20\s+create\s+session\s+s1\s+dev\s+0$/m);
    expect(ev.stdout.trimEnd().split("\n")).toHaveLength(3);
    const json = JSON.parse((await runCli(["events", "--json"], env)).stdout) as Array<{ id: string }>;
    expect(json.map((e) => e.id)).toEqual(["ev1", "ev2"]);
    expect((await runCli(["runners"], env)).stdout).toMatch(/^ID\s+POOL\s+STATE/);
  });

  it("a wrong token is unauthenticated, exit 1", async () => {
    const r = await runCli(["ls"], { ...env, PADDOCK_TOKEN: "wrong" });
    expect(r).toEqual({ code: 1, stdout: "", stderr: "error: unauthenticated: missing or invalid token\n" });
  });

  it("an answer that breaks the contract is reported, not printed", async () => {
    await runCli(["run", "-d", "--", "x"], env);
    const t = gw.terminals.get("s1");
    if (t) (t.session as { state: string }).state = "sleeping";
    const r = await runCli(["get", "s1"], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: internal: GET \/v1\/sessions\/s1: unexpected answer: state/);
  });
});
