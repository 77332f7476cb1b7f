import { describe, expect, it, vi } from "vitest";
import type { AuditEvent, Session } from "@paddock/contracts";
import { backoffDelay, debounce } from "../live.ts";
import { filterEvents, filterSessions, mergeEvents, runnerActions, sessionActions } from "./filters.ts";
import { listOf, parseInvalid, splitCommand } from "./forms.ts";
import { nextSort, sortRows, type Column } from "./table.ts";

const session = (id: string, state: Session["state"], name?: string) => ({ id, state, ...(name ? { name } : {}) }) as Session;
const event = (id: string, at: number, action: AuditEvent["action"], actorId = "dev") => ({ id, at, action, actorId }) as AuditEvent;

describe("session filter and actions", () => {
  const all = [session("ses_a1", "running", "web"), session("ses_b2", "suspended_cold"), session("ses_c3", "destroyed", "Old-Web")];
  it("keeps a state, and text in name or id, case-insensitively", () => {
    expect(filterSessions(all, { state: "", text: "" }).map((s) => s.id)).toEqual(["ses_a1", "ses_b2", "ses_c3"]);
    expect(filterSessions(all, { state: "running", text: "" }).map((s) => s.id)).toEqual(["ses_a1"]);
    expect(filterSessions(all, { state: "", text: " WEB " }).map((s) => s.id)).toEqual(["ses_a1", "ses_c3"]);
    expect(filterSessions(all, { state: "", text: "b2" }).map((s) => s.id)).toEqual(["ses_b2"]);
  });
  it("offers only what a state allows", () => {
    expect(sessionActions("running")).toEqual(["suspend-warm", "suspend-cold", "snapshot", "recycle", "delete"]);
    expect(sessionActions("suspended_warm")).toEqual(["suspend-cold", "resume", "recycle", "delete"]);
    expect(sessionActions("suspended_cold")).toEqual(["resume", "recycle", "delete"]);
    expect(sessionActions("queued")).toEqual(["delete"]);
    expect(sessionActions("destroyed")).toEqual([]);
    expect(runnerActions("active")).toEqual(["drain", "cordon"]);
    expect(runnerActions("cordoned")).toEqual(["drain", "uncordon"]);
    expect(runnerActions("lost")).toEqual([]);
  });
});

describe("events", () => {
  it("filters by action and actor", () => {
    const es = [event("e1", 1, "create", "usr_alice"), event("e2", 2, "suspend", "local-1"), event("e3", 3, "create", "local-1")];
    expect(filterEvents(es, { action: "create", actor: "" }).map((e) => e.id)).toEqual(["e1", "e3"]);
    expect(filterEvents(es, { action: "", actor: "LOCAL" }).map((e) => e.id)).toEqual(["e2", "e3"]);
  });
  it("merges without duplicates and keeps the newest", () => {
    let known = mergeEvents(new Map(), [event("e1", 1, "create"), event("e2", 2, "start")], 3);
    known = mergeEvents(known, [event("e2", 2, "start"), event("e3", 3, "exit"), event("e4", 4, "delete")], 3);
    expect([...known.keys()].sort()).toEqual(["e2", "e3", "e4"]);
  });
});

describe("forms", () => {
  it("puts each invalid message on the field it names", () => {
    const msg = "body: name: Too small: expected string to have >=1 characters; image: not an image reference; requirements.cpuMillis: too big; (root): odd";
    expect(parseInvalid(msg, ["name", "image", "requirements"])).toEqual({
      fields: { name: "Too small: expected string to have >=1 characters", image: "not an image reference", requirements: "cpuMillis: too big" },
      rest: ["(root): odd"],
    });
    expect(parseInvalid("body: spec.cmd.0: bad; spec.image: worse", ["spec"]).fields).toEqual({ spec: "cmd.0: bad; image: worse" });
    expect(parseInvalid("environment name taken", ["name"])).toEqual({ fields: {}, rest: ["environment name taken"] });
  });
  it("splits a command like a shell line, without expansion", () => {
    expect(splitCommand("  python  app.py --port 8080 ")).toEqual(["python", "app.py", "--port", "8080"]);
    expect(splitCommand(`sh -c 'echo "hi there"; ls $HOME'`)).toEqual(["sh", "-c", 'echo "hi there"; ls $HOME']);
    expect(splitCommand(`echo "a \\"b\\"" c\\ d ''`)).toEqual(["echo", 'a "b"', "c d", ""]);
    expect(splitCommand("")).toEqual([]);
    expect(() => splitCommand("echo 'open")).toThrow(/unclosed quote/);
  });
  it("reads lists from lines or commas", () => {
    expect(listOf("a.com\n b.org , ,\n\nc.net")).toEqual(["a.com", "b.org", "c.net"]);
  });
});

describe("table sorting", () => {
  type Row = { n: string; v: number };
  const cols: Column<Row>[] = [
    { key: "n", label: "N", value: (r) => r.n },
    { key: "v", label: "V", value: (r) => r.v },
  ];
  const rows: Row[] = [
    { n: "b", v: 10 },
    { n: "a", v: 9 },
    { n: "c", v: 10 },
  ];
  it("sorts numbers as numbers, text by locale, stable on ties", () => {
    expect(sortRows(rows, cols, { key: "v", dir: "ascending" }).map((r) => r.n)).toEqual(["a", "b", "c"]);
    expect(sortRows(rows, cols, { key: "v", dir: "descending" }).map((r) => r.n)).toEqual(["b", "c", "a"]);
    expect(sortRows(rows, cols, { key: "n", dir: "descending" }).map((r) => r.n)).toEqual(["c", "b", "a"]);
    expect(sortRows(rows, cols, undefined)).toEqual(rows);
  });
  it("toggles a column's direction", () => {
    expect(nextSort(undefined, "n")).toEqual({ key: "n", dir: "ascending" });
    expect(nextSort({ key: "n", dir: "ascending" }, "n")).toEqual({ key: "n", dir: "descending" });
    expect(nextSort({ key: "n", dir: "descending" }, "v")).toEqual({ key: "v", dir: "ascending" });
  });
});

describe("live helpers", () => {
  it("backs off doubling to a cap, with jitter below the base", () => {
    const at = (n: number, r: number) => backoffDelay(n, 500, 15_000, () => r);
    expect([0, 1, 2, 3].map((n) => at(n, 1))).toEqual([500, 1000, 2000, 4000]);
    expect(at(10, 1)).toBe(15_000);
    expect(at(100, 1)).toBe(15_000);
    expect(at(0, 0)).toBe(375);
  });
  it("debounces a burst into one call, and cancels", () => {
    vi.useFakeTimers();
    try {
      const fn = vi.fn();
      const run = debounce(fn, 100);
      run();
      vi.advanceTimersByTime(50);
      run();
      vi.advanceTimersByTime(99);
      expect(fn).not.toHaveBeenCalled();
      vi.advanceTimersByTime(1);
      expect(fn).toHaveBeenCalledTimes(1);
      run();
      run.cancel();
      vi.advanceTimersByTime(500);
      expect(fn).toHaveBeenCalledTimes(1);
    } finally {
      vi.useRealTimers();
    }
  });
});
