/** `paddock events --follow` against the in-process fake gateway: the NDJSON stream, flags and bad input. */
import { describe, expect, it } from "vitest";
import type { AuditEvent } from "@paddock/contracts";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { runCli } from "./testing/run-cli.ts";

const { gw, env } = useFakeGateway();

const event = (id: string, sessionId: string, action: AuditEvent["action"] = "create"): AuditEvent => ({
  id,
  workspaceId: "default",
  actorId: "dev",
  action,
  resource: { kind: "session", workspaceId: "default", id: sessionId, creatorId: "dev" },
  at: 1_700_000_000_000,
  usage: { cpuTimeSeconds: 0, memoryByteSeconds: 0, storageBytes: 0, networkBytes: 0, agentTokenCount: 0 },
  placementGeneration: 1,
});

describe("events --follow", () => {
  it("prints each streamed event as a row; the stream ending is reported (exit 1)", async () => {
    gw.events.push(event("e1", "s1"), event("e2", "s2", "place"));
    const r = await runCli(["events", "--follow"], env);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^AT\s+ACTION\s+KIND\s+RESOURCE\s+ACTOR\s+GEN$/);
    expect(lines.slice(1)).toHaveLength(2);
    expect(lines[2]).toMatch(/^2023-11-14 22:13:20\s+place\s+session\s+s2\s+dev\s+1$/);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("error: unavailable: the gateway closed the event stream\n");
    expect(Object.fromEntries(gw.follows[0] ?? [])).toEqual({ follow: "true" });
  });

  it("--json prints one event per line; -f and --session filter", async () => {
    gw.events.push(event("e1", "s1"), event("e2", "s2"), event("e3", "s1"));
    const r = await runCli(["events", "-f", "--session", "s1", "--json"], env);
    expect(r.stdout.trimEnd().split("\n").map((l) => (JSON.parse(l) as AuditEvent).id)).toEqual(["e1", "e3"]);
    expect(Object.fromEntries(gw.follows[0] ?? [])).toEqual({ follow: "true", sessionId: "s1" });
  });

  it("a line that breaks the contract is an internal error, not printed", async () => {
    gw.events.push(event("e1", "s1"));
    gw.followTail = '{"id":"x"}\n';
    const r = await runCli(["events", "--follow", "--json"], env);
    expect(r.code).toBe(1);
    expect(r.stdout.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^error: internal: GET \/v1\/events: unexpected event/);
  });

  it("refuses bad flags (exit 2) and reports the gateway's invalid (exit 1)", async () => {
    for (const argv of [["events", "--follow=yes"], ["events", "--follow", "extra"], ["events", "--session"], ["events", "--folow"]]) {
      const r = await runCli(argv, env);
      expect(r.code, argv.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
    }
    const bad = await runCli(["events", "--follow", "--session", "a.b"], env);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^error: invalid: /);
    expect((await runCli(["events", "--help"], env)).stdout).toMatch(/--follow/);
  });
});
