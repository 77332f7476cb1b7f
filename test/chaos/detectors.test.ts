/**
 * The chaos suite's pure detectors can fail: each is given clean input (and
 * must report nothing) and a planted fault (and must count it exactly). The
 * detectors that read a real nats-server are in detectors-nats.test.ts.
 */
import { describe, expect, it } from "vitest";
import { diffState, type StateSnapshot } from "../../chaos/src/checks.ts";
import { staleOutput, type FrameLike } from "../../chaos/src/markers.ts";
import { Anomalies, ChaosExit, formatResults, runExitCode, summaryLine, totalAnomalies, type ScenarioResult } from "../../chaos/src/report.ts";

/** A frame as the takeover scenario collects them; `bytes` may differ from the text length (latin1 of the wire bytes). */
const frame = (text: string, bytes = text.length): FrameLike => ({ text, bytes });

describe("staleOutput (incarnation markers `@<n>-<pid>@`)", () => {
  it("reports nothing for one incarnation handing over to the next, even with markers split across frames", () => {
    const frames = [
      frame("@1-100@start\r\n"),
      frame("@1-100@0\r\n@1-1"),
      frame("00@1\r\nr1a0\r\n"), // a marker whose end lands in the next frame, then echoed input
      frame("@2-200@start\r\n"),
      frame("@2-200@0\r\n@2-200@1\r\n"),
    ];
    const r = staleOutput(frames);
    expect(r).toEqual({ staleFrames: 0, staleBytes: 0, tags: ["1-100", "2-200"] });
    expect(staleOutput([])).toEqual({ staleFrames: 0, staleBytes: 0, tags: [] });
  });

  it("counts each frame holding an older incarnation's marker after a newer one, by the frames' byte counts", () => {
    const frames = [
      frame("@1-100@0\r\n"),
      frame("@2-200@start\r\n"),
      frame("@2-200@0\r\n"),
      frame("@1-100@1\r\n", 111), // planted: the superseded copy still writing
      frame("@2-200@1\r\n"),
      frame("@2-200@2\r\n@1-100@2\r\n@1-100@3\r\n", 222), // planted: two stale markers, one frame
    ];
    const r = staleOutput(frames);
    expect(r.staleFrames).toBe(2);
    expect(r.staleBytes).toBe(333);
    expect(r.tags).toEqual(["1-100", "2-200"]);
    expect(r.first).toMatch(/^frame 3: .*@1-100@1.* after 2-200$/);
  });

  it("attributes a stale marker split across frames to the frame holding its end", () => {
    const r = staleOutput([frame("@1-100@0\r\n"), frame("@2-200@0\r\n"), frame("@1-1", 4), frame("00@9\r\n", 7)]);
    expect(r).toMatchObject({ staleFrames: 1, staleBytes: 7 });
    // Split right before the closing `@`: the frame holding that `@` is the stale one.
    const edge = staleOutput([frame("@1-100@0\r\n"), frame("@2-200@0\r\n@1-100", 16), frame("@9\r\n", 4)]);
    expect(edge).toMatchObject({ staleFrames: 1, staleBytes: 4 });
  });

  it("counts output of a copy of the same count that was superseded by another copy (pid tells them apart)", () => {
    // Two copies resumed from one checkpoint (both n=2): the one that started last is current.
    const r = staleOutput([frame("@1-100@0\r\n"), frame("@2-200@0\r\n"), frame("@2-300@0\r\n"), frame("@2-200@1\r\n", 9)]);
    expect(r).toMatchObject({ staleFrames: 1, staleBytes: 9, tags: ["1-100", "2-200", "2-300"] });
  });

  // The start count orders copies, not first appearance: an older copy's first line may come
  // after a newer one's when the log's head aged out.
  it("counts an older incarnation (lower n) that first appears after a newer one", () => {
    const r = staleOutput([frame("@2-200@7\r\n"), frame("@1-100@8\r\n", 11), frame("@2-200@8\r\n", 12)]);
    expect(r).toMatchObject({ staleFrames: 1, staleBytes: 11, tags: ["2-200", "1-100"] });
    expect(r.first).toContain("after 2-200");
  });
});

describe("diffState", () => {
  const snapshot = (): StateSnapshot =>
    new Map([
      ["kv sessions default.s1", { summary: "rev 4 sha aaaa", fields: { state: "running", token: "tok-SECRET-1", lastFact: { action: "start", actorId: "r1" } } }],
      ["kv names default.n1", { summary: "rev 2 sha bbbb" }],
      ["obj checkpoints c1", { summary: "10 SHA-256=cc" }],
    ]);

  it("reports nothing for equal snapshots", () => {
    expect(diffState(snapshot(), snapshot())).toEqual([]);
  });

  it("reports a changed summary, an added key and a removed key, each once, naming fields but never values", () => {
    const before = snapshot();
    const after = snapshot();
    after.set("kv sessions default.s1", {
      summary: "rev 9 sha dddd",
      fields: { state: "destroyed", token: "tok-SECRET-2", lastFact: { action: "delete", actorId: "mallory" } },
    });
    after.delete("kv names default.n1");
    after.set("kv tokens t9", { summary: "rev 10 sha eeee" });
    const diff = diffState(before, after);
    expect(diff).toHaveLength(3);
    expect(diff).toContain("kv names default.n1 removed");
    expect(diff).toContain("kv tokens t9 added (rev 10 sha eeee)");
    const changed = diff.find((d) => d.startsWith("kv sessions default.s1 changed"));
    expect(changed).toBe("kv sessions default.s1 changed (rev 4 sha aaaa → rev 9 sha dddd): fields state, token, lastFact; last fact delete by mallory");
    expect(diff.join("\n")).not.toMatch(/SECRET|destroyed|running/);
  });

  it("reports a changed object-store entry (no fields to name)", () => {
    const after = snapshot();
    after.set("obj checkpoints c1", { summary: "10 SHA-256=cf" });
    expect(diffState(snapshot(), after)).toEqual(["obj checkpoints c1 changed (10 SHA-256=cc → 10 SHA-256=cf)"]);
  });
});

describe("Anomalies and the scenario totals", () => {
  const result = (anomalies: Record<string, number>): ScenarioResult => ({ name: "t", faults: 0, sessions: 0, anomalies, figures: [], details: [], seconds: 0 });

  it("declares every kind at zero and totals zero when nothing is added", () => {
    const a = new Anomalies(["x", "y"]);
    expect(a.counts).toEqual({ x: 0, y: 0 });
    expect(a.total).toBe(0);
    expect(totalAnomalies(result(a.counts))).toBe(0);
    expect(runExitCode([result(a.counts)])).toBe(0);
  });

  it("keeps counts exact past the per-kind detail cap, and sums them", () => {
    const a = new Anomalies(["x", "y", "z"]);
    for (let i = 0; i < 10; i++) a.add("x", `x${i}`);
    a.add("y", "three at once", 3);
    a.add("y", "none", 0);
    a.add("y", "negative", -2);
    a.add("undeclared");
    expect(a.counts).toEqual({ x: 10, y: 3, z: 0, undeclared: 1 });
    expect(a.total).toBe(14);
    expect(a.details.filter((d) => d.startsWith("x: "))).toEqual([
      ...[0, 1, 2, 3, 4, 5].map((i) => `x: x${i}`),
      "x: … (further ones counted, not listed)",
    ]);
    expect(a.details).toContain("y: three at once");
    expect(a.details.join("\n")).not.toMatch(/none|negative/);
    expect(totalAnomalies(result(a.counts))).toBe(14);
    expect(runExitCode([result({ x: 0 }), result(a.counts)])).toBe(1);
  });

  it("keeps counts exact past the overall detail cap", () => {
    const kinds = Array.from({ length: 100 }, (_, i) => `k${i}`);
    const a = new Anomalies(kinds);
    for (const k of kinds) a.add(k, `${k} detail`, 2);
    expect(a.details).toHaveLength(60);
    expect(Object.values(a.counts).every((n) => n === 2)).toBe(true);
    expect(a.total).toBe(200);
    expect(totalAnomalies(result(a.counts))).toBe(200);
  });
});

describe("the chaos run's exit code", () => {
  const clean: ScenarioResult = { name: "x", faults: 1, sessions: 1, anomalies: { stale: 0, lost: 0 }, figures: [], details: [], seconds: 1 };

  it("is 0 only when every scenario is clean", () => {
    expect(runExitCode([])).toBe(0);
    expect(runExitCode([clean, { ...clean, name: "y" }])).toBe(0);
  });

  it("is 1 on a single anomaly anywhere, with or without a harness error", () => {
    expect(runExitCode([clean, { ...clean, anomalies: { stale: 0, lost: 1 } }])).toBe(1);
    expect(runExitCode([{ ...clean, error: "cluster not ready" }, { ...clean, anomalies: { stale: 0, lost: 1 } }])).toBe(1);
  });

  it("is 3 on a harness error without an anomaly: not a finding, but not a clean run", () => {
    expect(runExitCode([{ ...clean, error: "stack did not start" }, clean])).toBe(ChaosExit.harnessError);
    expect(ChaosExit.harnessError).toBe(3);
  });
});

describe("the chaos report tells a harness error from an anomaly", () => {
  const clean: ScenarioResult = { name: "broker", faults: 1, sessions: 1, anomalies: { lost: 0 }, figures: [], details: [], seconds: 1 };
  const failed: ScenarioResult = { ...clean, error: "JetStreamStatusError: no responders\n    at fetch" };

  it("prints a HARNESS ERROR row of its own, and the anomaly count stays what was counted", () => {
    const table = formatResults([failed]);
    expect(table).toMatch(/^broker\s+HARNESS ERROR\s+1\s+JetStreamStatusError: no responders \(not an anomaly; counts below are incomplete\)$/m);
    expect(table).toMatch(/^broker\s+anomalies\s+0\s+goal: 0$/m);
    expect(table).not.toMatch(/ANOMALY/);
    expect(formatResults([clean])).not.toMatch(/HARNESS ERROR/);
  });

  it("counts anomalies and harness errors apart in the last line", () => {
    expect(summaryLine([clean])).toBe("0 anomalies; no harness errors");
    expect(summaryLine([failed, { ...clean, name: "takeovers", anomalies: { lost: 1 } }])).toBe(
      "1 anomaly; HARNESS ERROR in broker (not a finding; those scenarios proved nothing)",
    );
  });
});
