import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { CLOSE_SLOW_CLIENT, CLOSE_SUPERSEDED, Headers, INPUT_WINDOW_BYTES, ResizeInput, Streams, Subjects } from "@paddock/contracts";
import {
  Collector,
  makeSession,
  openOk,
  openTerminal,
  publishChunk,
  useHarness,
  TOKENS,
  WS1,
  WS2,
  type WsClient,
} from "../testing/testkit.ts";
import { MAX_HELD_INPUT_BYTES } from "./attachment.ts";

const MAX_PER_SUBJECT = 5;
let n = 0;
const h = useHarness({ termMaxMsgsPerSubject: MAX_PER_SUBJECT, config: { wsSendBufferBytes: 256 * 1024 } });

/** A fresh running session of alice's in WS1 (one app, "main"). */
function newSession(p: Parameters<typeof makeSession>[0] extends infer T ? Partial<T> : never = {}): string {
  const id = `t${++n}`;
  h.scheduler.put(makeSession({ id, workspaceId: WS1, creatorId: "alice", ...p }));
  return id;
}

async function binaries(c: WsClient, count: number): Promise<Array<{ cursor: number; text: string }>> {
  const out: Array<{ cursor: number; text: string }> = [];
  for (let i = 0; i < count; i++) out.push(await c.nextBinary());
  return out;
}

describe("attach refusals (plain HTTP, before any WebSocket)", () => {
  it("refuses a missing, wrong or expired token with 401", async () => {
    const id = newSession();
    for (const token of [undefined, "tok_wrong_0000000000000", TOKENS.expired]) {
      const r = await openTerminal(h.wsUrl, id, "", token);
      expect(r).toMatchObject({ ok: false, status: 401 });
      if (!r.ok) expect(JSON.parse(r.body)).toMatchObject({ error: { code: "unauthenticated" } });
    }
  });

  it("another workspace's session is 404; bad query 400; several apps without app 400; unknown app 404", async () => {
    const theirs = "other1";
    h.scheduler.put(makeSession({ id: theirs, workspaceId: WS2, creatorId: "eve" }));
    expect(await openTerminal(h.wsUrl, theirs, "", TOKENS.alice)).toMatchObject({ ok: false, status: 404 });
    const id = newSession({ spec: { apps: [{ name: "a", cmd: ["x"] }, { name: "b", cmd: ["y"] }] } });
    expect(await openTerminal(h.wsUrl, id, "", TOKENS.alice)).toMatchObject({ ok: false, status: 400 });
    expect(await openTerminal(h.wsUrl, id, "app=c", TOKENS.alice)).toMatchObject({ ok: false, status: 404 });
    expect(await openTerminal(h.wsUrl, id, "app=a&mode=boss", TOKENS.alice)).toMatchObject({ ok: false, status: 400 });
    expect(await openTerminal(h.wsUrl, id, "app=a&since=yesterday", TOKENS.alice)).toMatchObject({ ok: false, status: 400 });
    expect(await openTerminal(h.wsUrl, id, "app=a&extra=1", TOKENS.alice)).toMatchObject({ ok: false, status: 400 });
    const ok = await openOk(h.wsUrl, id, "app=b", TOKENS.alice);
    expect(await ok.nextText()).toMatchObject({ type: "hello", app: "b" });
    ok.close();
  });

  it("a non-creator member may view but not control (403); an admin may control", async () => {
    const id = newSession();
    expect(await openTerminal(h.wsUrl, id, "mode=controller", TOKENS.bob)).toMatchObject({ ok: false, status: 403 });
    expect(h.scheduler.callsOf("attach").filter((c) => (c.request as { sessionId: string }).sessionId === id)).toEqual([]);
    const viewer = await openOk(h.wsUrl, id, "mode=viewer", TOKENS.bob);
    expect(await viewer.nextText()).toMatchObject({ type: "hello", mode: "viewer" });
    const admin = await openOk(h.wsUrl, id, "mode=controller", TOKENS.admin);
    expect(await admin.nextText()).toMatchObject({ type: "hello", mode: "controller", controllerGeneration: 1 });
    viewer.close();
    admin.close();
  });
});

describe("output", () => {
  it("hello carries the last cursor; since=all replays every chunk then live", async () => {
    const id = newSession();
    const s1 = await publishChunk(h.nc, id, "main", "a");
    const s2 = await publishChunk(h.nc, id, "main", "b");
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    expect(await c.nextText()).toEqual({ type: "hello", sessionId: id, app: "main", mode: "viewer", controllerGeneration: 0, cursor: s2 });
    expect(await binaries(c, 2)).toEqual([
      { cursor: s1, text: "a" },
      { cursor: s2, text: "b" },
    ]);
    const s3 = await publishChunk(h.nc, id, "main", "c");
    expect(await c.nextBinary()).toEqual({ cursor: s3, text: "c" });
    c.close();
  });

  it("hello cursor is 0 for an empty log; live chunks follow", async () => {
    const id = newSession();
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    expect(await c.nextText()).toMatchObject({ type: "hello", cursor: 0 });
    const s1 = await publishChunk(h.nc, id, "main", "live");
    expect(await c.nextBinary()).toEqual({ cursor: s1, text: "live" });
    c.close();
  });

  it("since=<cursor> resumes with every later chunk exactly once", async () => {
    const id = newSession();
    const seqs: number[] = [];
    for (const t of ["1", "2", "3", "4"]) seqs.push(await publishChunk(h.nc, id, "main", t));
    const c = await openOk(h.wsUrl, id, `since=${seqs[1]}`, TOKENS.bob);
    expect(await c.nextText()).toMatchObject({ type: "hello", cursor: seqs[3] });
    expect(await binaries(c, 2)).toEqual([
      { cursor: seqs[2], text: "3" },
      { cursor: seqs[3], text: "4" },
    ]);
    const s5 = await publishChunk(h.nc, id, "main", "5");
    expect(await c.nextBinary()).toEqual({ cursor: s5, text: "5" });
    expect(c.queued).toBe(0);
    c.close();
  });

  it("a purged cursor gets truncated{from: first retained} then a screen snapshot, then live", async () => {
    const id = newSession();
    const seqs: number[] = [];
    for (let i = 0; i < MAX_PER_SUBJECT + 3; i++) seqs.push(await publishChunk(h.nc, id, "main", `L${i}\r\n`));
    const firstRetained = seqs[3]!;
    const c = await openOk(h.wsUrl, id, `since=${seqs[1]}`, TOKENS.bob);
    expect(await c.nextText()).toMatchObject({ type: "hello", cursor: seqs.at(-1) });
    expect(await c.nextText()).toEqual({ type: "truncated", from: firstRetained });
    const snap = await c.nextBinary();
    expect(snap.cursor).toBe(seqs.at(-1));
    expect(snap.text).toContain("L7");
    expect(snap.text).toContain("L3");
    expect(snap.text).not.toContain("L2");
    const live = await publishChunk(h.nc, id, "main", "after");
    expect(await c.nextBinary()).toEqual({ cursor: live, text: "after" });
    c.close();
  });

  it("a cursor whose message was deleted is truncated too", async () => {
    const id = newSession();
    const s1 = await publishChunk(h.nc, id, "main", "x");
    const s2 = await publishChunk(h.nc, id, "main", "y");
    const jsm = await jetstreamManager(h.nc);
    await jsm.streams.deleteMessage(Streams.term, s1);
    const c = await openOk(h.wsUrl, id, `since=${s1}`, TOKENS.bob);
    await c.nextText();
    expect(await c.nextText()).toEqual({ type: "truncated", from: s2 });
    expect(await c.nextBinary()).toMatchObject({ cursor: s2 });
    c.close();
  });

  it("since=screen (default) sends one snapshot frame rendered by a terminal emulator, then live", async () => {
    const id = newSession();
    await publishChunk(h.nc, id, "main", "hello\r\n");
    // Alternate screen: the snapshot shows what the program painted, then its exit back.
    await publishChunk(h.nc, id, "main", "\x1b[?1049h\x1b[2J\x1b[HVIM SCREEN");
    const last = await publishChunk(h.nc, id, "main", "\x1b[?1049lback");
    const c = await openOk(h.wsUrl, id, "", TOKENS.bob);
    expect(await c.nextText()).toMatchObject({ type: "hello", cursor: last });
    const snap = await c.nextBinary();
    expect(snap.cursor).toBe(last);
    expect(snap.text).toContain("hello");
    expect(snap.text).toContain("back");
    expect(snap.text).not.toContain("\x1b[?1049h");
    const live = await publishChunk(h.nc, id, "main", "!");
    expect(await c.nextBinary()).toEqual({ cursor: live, text: "!" });
    c.close();
  });

  it("since=screen on an empty log sends an empty snapshot at cursor 0", async () => {
    const id = newSession();
    const c = await openOk(h.wsUrl, id, "since=screen", TOKENS.bob);
    await c.nextText();
    expect(await c.nextBinary()).toEqual({ cursor: 0, text: "" });
    c.close();
  });

  it("drops chunks from a placement generation older than the record's, and a newer one the record does not know", async () => {
    const id = newSession({ placementGeneration: 3 });
    await publishChunk(h.nc, id, "main", "stale", { placementGeneration: 2 });
    const fresh = await publishChunk(h.nc, id, "main", "fresh", { placementGeneration: 3 });
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await c.nextText();
    expect(await c.nextBinary()).toEqual({ cursor: fresh, text: "fresh" });
    await publishChunk(h.nc, id, "main", "stale live", { placementGeneration: 2 });
    // Generation 4 before any record says so: written by nobody the record placed.
    await publishChunk(h.nc, id, "main", "unplaced", { placementGeneration: 4 });
    const still = await publishChunk(h.nc, id, "main", "still 3", { placementGeneration: 3 });
    expect(await c.nextBinary()).toEqual({ cursor: still, text: "still 3" });
    c.close();
  });

  it("never shows a chunk written under another runner's subject, whatever generation it claims", async () => {
    const id = newSession({ placementGeneration: 2 });
    const intruder = { poolId: "default", runnerId: "r2" };
    const before = (await h.metrics.droppedChunks.get()).values.find((v) => v.labels.reason === "foreign")?.value ?? 0;
    await publishChunk(h.nc, id, "main", "FORGED-1", { placementGeneration: 2, runner: intruder });
    const mine = await publishChunk(h.nc, id, "main", "mine", { placementGeneration: 2 });
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await c.nextText();
    expect(await c.nextBinary()).toEqual({ cursor: mine, text: "mine" });
    await publishChunk(h.nc, id, "main", "FORGED-2", { placementGeneration: 2, runner: intruder });
    const after = await publishChunk(h.nc, id, "main", "after", { placementGeneration: 2 });
    expect(await c.nextBinary()).toEqual({ cursor: after, text: "after" });
    c.close();
    // Nor in the log endpoint or a screen snapshot.
    const log = await fetch(`${h.url}/v1/sessions/${id}/log`, { headers: { authorization: `Bearer ${TOKENS.bob}` } });
    expect(await log.text()).toBe("mineafter");
    const screen = await openOk(h.wsUrl, id, "since=screen", TOKENS.bob);
    await screen.nextText();
    const snapshot = await screen.nextBinary();
    expect(snapshot.text).toContain("mineafter");
    expect(snapshot.text).not.toContain("FORGED");
    screen.close();
    const dropped = (await h.metrics.droppedChunks.get()).values.find((v) => v.labels.reason === "foreign")?.value ?? 0;
    expect(dropped - before).toBeGreaterThanOrEqual(3);
  });

  it("follows the session to its next placement: the new runner's output is shown and input goes to it", async () => {
    const id = newSession({ placementGeneration: 1 });
    const moved = { poolId: "default", runnerId: "r9" };
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    await c.nextText();
    const first = await publishChunk(h.nc, id, "main", "on r1", { placementGeneration: 1 });
    expect(await c.nextBinary()).toEqual({ cursor: first, text: "on r1" });
    // The session is resumed elsewhere: the record moves first, then the new runner writes.
    h.scheduler.put({ ...h.scheduler.sessions.get(`${WS1}.${id}`)!, placementGeneration: 2, runnerId: moved.runnerId });
    const second = await publishChunk(h.nc, id, "main", "on r9", { placementGeneration: 2, runner: moved });
    expect(await c.nextBinary()).toEqual({ cursor: second, text: "on r9" });
    const inputs = new Collector(h.nc, Subjects.input(moved.poolId, moved.runnerId, id, "main"));
    c.ws.send(Buffer.from("to r9"));
    expect((await inputs.next()).string()).toBe("to r9");
    inputs.sub.unsubscribe();
    c.close();
  });

  it("an exit chunk sends exit{code} and closes 1000; an exit by signal has code null", async () => {
    const id = newSession();
    await publishChunk(h.nc, id, "main", "bye");
    await publishChunk(h.nc, id, "main", "", { exitCode: "3" });
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await c.nextText();
    expect(await c.nextBinary()).toMatchObject({ text: "bye" });
    expect(await c.nextText()).toEqual({ type: "exit", app: "main", code: 3 });
    expect((await c.closed).code).toBe(1000);

    const id2 = newSession();
    const live = await openOk(h.wsUrl, id2, "", TOKENS.bob);
    await live.nextText();
    await live.nextBinary(); // empty snapshot
    await publishChunk(h.nc, id2, "main", "", { exitCode: "" });
    expect(await live.nextText()).toEqual({ type: "exit", app: "main", code: null });
    expect((await live.closed).code).toBe(1000);
  });

  it("closes a client that stops reading with 4008", async () => {
    const id = newSession();
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await c.nextText();
    c.ws.pause();
    const chunk = "z".repeat(32 * 1024);
    const before = (await h.metrics.slowClients.get()).values[0]?.value ?? 0;
    for (let i = 0; i < 4096; i++) {
      await publishChunk(h.nc, id, "main", chunk);
      if (((await h.metrics.slowClients.get()).values[0]?.value ?? 0) > before) break;
    }
    expect((await h.metrics.slowClients.get()).values[0]?.value).toBe(before + 1);
    c.ws.resume();
    expect((await c.closed).code).toBe(CLOSE_SLOW_CLIENT);
  });
});

describe("input", () => {
  it("a viewer's input is refused with read_only and the socket stays open", async () => {
    const id = newSession();
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "since=all", TOKENS.bob);
    await c.nextText();
    c.ws.send(Buffer.from("rm -rf /\n"));
    expect(await c.nextText()).toMatchObject({ type: "error", code: "read_only" });
    c.ws.send(JSON.stringify({ type: "resize", cols: 100, rows: 30 }));
    expect(await c.nextText()).toMatchObject({ type: "error", code: "read_only" });
    c.ws.send("{oops");
    expect(await c.nextText()).toMatchObject({ type: "error", code: "invalid" });
    const s = await publishChunk(h.nc, id, "main", "still here");
    expect(await c.nextBinary()).toEqual({ cursor: s, text: "still here" });
    // Nothing but nothing reached the input subject: a sentinel is the first message seen.
    h.nc.publish(Subjects.input("default", "r1", id, "main"), "sentinel");
    expect((await inputs.next()).string()).toBe("sentinel");
    inputs.sub.unsubscribe();
    c.close();
  });

  it("a controller claims, then its input and resizes reach the input subject with its generation", async () => {
    const id = newSession({ controllerGeneration: 4 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello", mode: "controller", controllerGeneration: 5 });
    const claim = await inputs.next();
    expect(claim.headers?.get(Headers.inputKind)).toBe("claim");
    expect(claim.headers?.get(Headers.controllerGeneration)).toBe("5");
    c.ws.send(Buffer.from("ls\n"));
    const data = await inputs.next();
    expect(data.headers?.get(Headers.inputKind)).toBe("data");
    expect(data.headers?.get(Headers.controllerGeneration)).toBe("5");
    expect(data.string()).toBe("ls\n");
    c.ws.send(JSON.stringify({ type: "resize", cols: 120, rows: 40 }));
    const resize = await inputs.next();
    expect(resize.headers?.get(Headers.inputKind)).toBe("resize");
    expect(ResizeInput.parse(resize.json())).toEqual({ cols: 120, rows: 40 });
    c.ws.send(JSON.stringify({ type: "resize", cols: 0, rows: 40 }));
    expect(await c.nextText()).toMatchObject({ type: "error", code: "invalid" });
    inputs.sub.unsubscribe();
    c.close();
  });

  it("input sent before the session runs is held and delivered in order once it does", async () => {
    const id = newSession({ state: "creating", controllerGeneration: 1 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    expect((await inputs.next()).headers?.get(Headers.inputKind)).toBe("claim");
    c.ws.send(Buffer.from("abc\n"));
    c.ws.send(JSON.stringify({ type: "resize", cols: 100, rows: 30 }));
    c.ws.send(Buffer.from("def\n"));
    // Nothing reaches the runner while the record says creating: a fact that changes nothing holds it.
    h.nc.publish(Subjects.audit(WS1, "session", id), "{}");
    await h.nc.flush();
    h.scheduler.put({ ...h.scheduler.sessions.get(`${WS1}.${id}`)!, state: "running" });
    h.nc.publish(Subjects.audit(WS1, "session", id), "{}");
    expect(await c.nextText()).toEqual({ type: "status", state: "running" });
    const delivered = [await inputs.next(), await inputs.next(), await inputs.next()];
    expect(delivered.map((m) => m.headers?.get(Headers.inputKind))).toEqual(["data", "resize", "data"]);
    expect([delivered[0]?.string(), delivered[2]?.string()]).toEqual(["abc\n", "def\n"]);
    // Once running, input goes straight through.
    c.ws.send(Buffer.from("ghi\n"));
    expect((await inputs.next()).string()).toBe("ghi\n");
    inputs.sub.unsubscribe();
    c.close();
  });

  it("a session that ran before the attach subscribed is noticed: held input is not stranded", async () => {
    const id = newSession({ state: "creating", controllerGeneration: 1 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    // The record moves on between the attach's read and its subscription (no fact will follow).
    h.scheduler.afterAttach = (granted) => {
      if (granted.id === id) h.scheduler.put({ ...granted, state: "running" });
    };
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    h.scheduler.afterAttach = undefined;
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    expect(await c.nextText()).toEqual({ type: "status", state: "running" });
    c.ws.send(Buffer.from("late\n"));
    const messages = [await inputs.next(), await inputs.next()];
    expect(messages.map((m) => m.headers?.get(Headers.inputKind))).toEqual(["claim", "data"]);
    expect(messages[1]?.string()).toBe("late\n");
    inputs.sub.unsubscribe();
    c.close();
  });

  it("input held past its bound waits unread and all of it goes on in order once the session runs", async () => {
    const id = newSession({ state: "queued", controllerGeneration: 1 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    await inputs.next(); // the claim
    const sent = Buffer.concat([Buffer.alloc(MAX_HELD_INPUT_BYTES, 0x61), Buffer.from("xyz"), Buffer.alloc(3 * MAX_HELD_INPUT_BYTES, 0x62)]);
    c.ws.send(sent.subarray(0, MAX_HELD_INPUT_BYTES));
    c.ws.send(sent.subarray(MAX_HELD_INPUT_BYTES, MAX_HELD_INPUT_BYTES + 3));
    for (let at = MAX_HELD_INPUT_BYTES + 3; at < sent.length; at += 16 * 1024) c.ws.send(sent.subarray(at, at + 16 * 1024));
    h.scheduler.put({ ...h.scheduler.sessions.get(`${WS1}.${id}`)!, state: "running" });
    h.nc.publish(Subjects.audit(WS1, "session", id), "{}");
    expect(await c.nextText()).toEqual({ type: "status", state: "running" });
    // Acting as the runner: take the data, grant every credit request.
    const got: Buffer[] = [];
    let total = 0;
    while (total < sent.length) {
      const m = await inputs.next();
      const kind = m.headers?.get(Headers.inputKind);
      if (kind === "credit") m.respond(JSON.stringify({ ready: true }));
      else if (kind === "data") {
        got.push(Buffer.from(m.data));
        total += m.data.byteLength;
      }
    }
    expect(Buffer.concat(got).equals(sent)).toBe(true);
    expect((await h.metrics.inputDropped.get()).values.find((v) => v.labels.reason === "not_running")).toBeUndefined();
    inputs.sub.unsubscribe();
    c.close();
  });

  it("the credit window: past it nothing more is published until the runner grants credit", async () => {
    const id = newSession({ controllerGeneration: 1 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    await inputs.next(); // the claim
    const chunk = 16 * 1024;
    const sent = Buffer.alloc(INPUT_WINDOW_BYTES * 3, 0x63);
    for (let at = 0; at < sent.length; at += chunk) c.ws.send(sent.subarray(at, at + chunk));
    let before = 0;
    for (;;) {
      const m = await inputs.next();
      if (m.headers?.get(Headers.inputKind) === "credit") {
        // Everything published before the request is in; a sentinel published now comes before any more data.
        h.nc.publish(Subjects.input("default", "r1", id, "main"), "sentinel");
        expect((await inputs.next()).string()).toBe("sentinel");
        m.respond(JSON.stringify({ ready: true }));
        break;
      }
      before += m.data.byteLength;
    }
    expect(before).toBe(INPUT_WINDOW_BYTES);
    let total = before;
    while (total < sent.length) {
      const m = await inputs.next();
      if (m.headers?.get(Headers.inputKind) === "credit") m.respond(JSON.stringify({ ready: true }));
      else total += m.data.byteLength;
    }
    expect(total).toBe(sent.length);
    inputs.sub.unsubscribe();
    c.close();
  });

  it("a session that ends without running drops what was held (counted)", async () => {
    const id = newSession({ state: "queued", controllerGeneration: 1 });
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const c = await openOk(h.wsUrl, id, "mode=controller&since=all", TOKENS.alice);
    expect(await c.nextText()).toMatchObject({ type: "hello" });
    await inputs.next(); // the claim
    c.ws.send(Buffer.from("never"));
    // Frames are handled in order: once a malformed one is answered, "never" is held.
    c.ws.send("not a frame");
    expect(await c.nextText()).toMatchObject({ type: "error", code: "invalid" });
    const dropped = async () => (await h.metrics.inputDropped.get()).values.find((v) => v.labels.reason === "ended")?.value ?? 0;
    const before = await dropped();
    h.scheduler.put({ ...h.scheduler.sessions.get(`${WS1}.${id}`)!, state: "canceled" });
    h.nc.publish(Subjects.audit(WS1, "session", id), "{}");
    expect(await c.nextText()).toEqual({ type: "status", state: "canceled" });
    expect(await dropped()).toBe(before + 1);
    // A sentinel behind anything the gateway could have published: it comes first.
    h.nc.publish(Subjects.input("default", "r1", id, "main"), "sentinel");
    expect((await inputs.next()).string()).toBe("sentinel");
    inputs.sub.unsubscribe();
    c.close();
  });

  it("a newer controller on another replica supersedes the older: 4001, and its later input is never published", async () => {
    const id = newSession();
    const other = await h.addGateway();
    const inputs = new Collector(h.nc, Subjects.input("default", "r1", id, "main"));
    const first = await openOk(h.wsUrl, id, "mode=controller", TOKENS.alice);
    expect(await first.nextText()).toMatchObject({ type: "hello", controllerGeneration: 1 });
    first.ws.send(Buffer.from("early"));
    const seen: Array<{ kind: string; gen: string; body: string }> = [];
    const take = async () => {
      const m = await inputs.next();
      const rec = { kind: m.headers?.get(Headers.inputKind) ?? "", gen: m.headers?.get(Headers.controllerGeneration) ?? "", body: m.string() };
      seen.push(rec);
      return rec;
    };
    expect(await take()).toMatchObject({ kind: "claim", gen: "1" });
    expect(await take()).toEqual({ kind: "data", gen: "1", body: "early" });

    // The first client answers the superseded frame with more input, as a racing client would.
    const superseded = new Promise<Record<string, unknown>>((resolve) => {
      first.ws.on("message", (raw, isBinary) => {
        if (isBinary) return;
        const f = JSON.parse(String(raw)) as Record<string, unknown>;
        if (f.type === "superseded") {
          first.ws.send(Buffer.from("late"));
          resolve(f);
        }
      });
    });
    const second = await openOk(other.wsUrl, id, "mode=controller", TOKENS.admin);
    expect(await second.nextText()).toMatchObject({ type: "hello", controllerGeneration: 2 });
    expect(await superseded).toEqual({ type: "superseded", controllerGeneration: 2 });
    expect((await first.closed).code).toBe(CLOSE_SUPERSEDED);

    await h.nc.flush();
    second.ws.send(Buffer.from("sentinel"));
    for (;;) {
      const rec = await take();
      if (rec.body === "sentinel") break;
    }
    expect(seen.filter((r) => r.kind === "data").map((r) => [r.gen, r.body])).toEqual([
      ["1", "early"],
      ["2", "sentinel"],
    ]);
    expect(seen.filter((r) => r.kind === "claim").map((r) => r.gen)).toEqual(["1", "2"]);
    // The late input did reach the first gateway, which refused it.
    expect((await h.metrics.inputDropped.get()).values.find((v) => v.labels.reason === "closed")?.value).toBe(1);
    inputs.sub.unsubscribe();
    second.close();
  });
});
