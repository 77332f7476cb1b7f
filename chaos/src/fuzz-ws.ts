/**
 * Malformed terminal WebSocket input: refused upgrades (bad ids, queries,
 * tokens, origins), malformed text frames and raw binary frames on an open
 * controller, and protocol garbage (invalid UTF-8, oversize frames, odd
 * control frames) on throwaway viewers. A 5xx upgrade answer, an `internal`
 * error frame or a 1011 close is an anomaly.
 */
import WebSocket from "ws";
import { ClientFrame } from "@paddock/contracts";
import type { Terminal } from "./client.ts";
import { countStatus, excerpt, nextInput, type FuzzContext } from "./fuzz-context.ts";
import { badId, brokenJsonText, encode, nastyString, randomJson, refusedBy } from "./fuzz-values.ts";
import type { Prng } from "./prng.ts";

interface Upgrade {
  url: string;
  headers: Record<string, string>;
  controller: boolean;
  defects: string[];
}

function upgradeRequest(ctx: FuzzContext, p: Prng): Upgrade {
  const f = ctx.fixtures;
  const defects: string[] = [];
  const id = p.bool(0.2) ? (defects.push("id"), encode(badId(p))) : p.pick([f.running.id, f.dead.id, `ses_${p.string(20)}`]);
  const controller = p.bool(0.5);
  const q: string[] = [];
  if (controller) q.push("mode=controller");
  else if (p.bool(0.3)) q.push(`mode=${p.pick(["viewer", "Controller", "admin", "", encode(nastyString(p))])}`);
  if (p.bool(0.6)) q.push(`since=${encode(p.pick(["all", "screen", "0", "5", "-1", "1e3", "9".repeat(16), "screen ", nastyString(p)]))}`);
  if (p.bool(0.3)) q.push(`app=${encode(p.pick(["main", "nope", badId(p)]))}`);
  const headers: Record<string, string> = { authorization: `Bearer ${ctx.stack.token}` };
  const defect = (name: string) => defects.push(name);
  // A controller attach that succeeded would advance the controller generation: it always carries a refused defect.
  const kinds = ["query", "token-in-url", "ticket", "auth", "origin", "since"];
  const chosen = new Set(kinds.filter(() => p.bool(0.25)));
  if (controller && chosen.size === 0 && defects.length === 0) chosen.add(p.pick(kinds));
  upgradeDefects(ctx, p, { chosen, q, headers, defect });
  if (chosen.has("since")) (q.push(`since=${encode(p.pick(["-1", "x", "9".repeat(16), ""]))}`), defect("since"));
  const path = p.bool(0.05) ? `/v1/sessions/${id}/terminal/${p.string(3)}` : `/v1/sessions/${id}/terminal`;
  return { url: `${ctx.stack.url.replace(/^http/, "ws")}${path}?${q.join("&")}`, headers, controller, defects };
}

/** Attempts one upgrade; resolves with the refusal status, or 101 once an accepted socket said hello (then closes it). */
function tryUpgrade(u: Upgrade): Promise<{ status: number; close?: number; internal?: boolean }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(u.url, { headers: u.headers });
    let internal = false;
    const timer = setTimeout(() => ws.terminate(), 5_000);
    ws.on("unexpected-response", (_req, res) => {
      clearTimeout(timer);
      res.resume();
      ws.terminate();
      resolve({ status: res.statusCode ?? 0 });
    });
    ws.on("message", (data, isBinary) => {
      if (!isBinary && /"code":"internal"/.test(data.toString())) internal = true;
      ws.close();
    });
    ws.on("close", (code) => {
      clearTimeout(timer);
      resolve({ status: 101, close: code, internal });
    });
    ws.on("error", () => undefined);
  });
}

/** A text frame the protocol refuses (ClientFrame does not parse it). */
function badTextFrame(p: Prng): string {
  if (p.bool(0.3)) return brokenJsonText(p, { type: "resize", cols: 80, rows: 24 });
  const v = p.bool(0.6) ? refusedBy(p, ClientFrame, { type: "resize", cols: 80, rows: 24 }) : randomJson(p);
  return JSON.stringify(v) ?? "null";
}

/** Garbage a throwaway viewer sends: invalid UTF-8, oversize, binary (read-only), pings, odd closes. */
async function protocolGarbage(ctx: FuzzContext, p: Prng, frames: number): Promise<void> {
  const ws = new WebSocket(`${ctx.stack.url.replace(/^http/, "ws")}/v1/sessions/${ctx.fixtures.running.id}/terminal?since=${"9".repeat(15)}`, {
    headers: { authorization: `Bearer ${ctx.stack.token}` },
  });
  const opened = await new Promise<boolean>((resolve) => {
    ws.once("open", () => resolve(true));
    ws.once("error", () => resolve(false));
    ws.once("unexpected-response", (_req, res) => {
      countStatus(ctx, res.statusCode ?? 0);
      resolve(false);
    });
  });
  if (!opened) return;
  const sentDescriptions: string[] = [];
  const closed = new Promise<number>((resolve) => ws.on("close", (code) => resolve(code)));
  ws.on("message", (data, isBinary) => {
    if (!isBinary && /"code":"internal"/.test(data.toString())) ctx.anomalies.add("internal errors", `viewer frame after ${sentDescriptions.join(", ")}: ${excerpt(data.toString())}`);
  });
  for (let i = 0; i < frames && ws.readyState === WebSocket.OPEN; i++) {
    const n = nextInput(ctx, "websocket frame");
    const kind = p.int(0, 5);
    try {
      if (kind === 0) ws.send(Buffer.from([0xc3, 0x28, 0xff, 0xfe]), { binary: false });
      else if (kind === 1) ws.send(p.bytes(64 * 1024 + p.int(1, 1000)), { binary: p.bool() });
      else if (kind === 2) ws.send(p.bytes(p.int(0, 100)), { binary: true });
      else if (kind === 3) ws.ping(p.bytes(p.int(0, 125)));
      else if (kind === 4) ws.send(badTextFrame(p), { binary: false });
      else ws.close(p.pick([1000, 1001, 3000, 4999]), p.string(p.int(0, 100)));
    } catch {
      // the client refused to send it
    }
    sentDescriptions.push(`#${n} kind ${kind}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  if (ws.readyState === WebSocket.OPEN) ws.close();
  const code = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(-1), 3_000))]);
  if (code === -1) ws.terminate();
  if (code === 1011) ctx.anomalies.add("internal errors", `viewer closed 1011 after ${sentDescriptions.join(", ")}`);
}

/**
 * Sends `count` malformed WebSocket inputs. `controller` is the fixture's
 * open controller socket (opened before the state snapshot): malformed text
 * frames and raw stdin go through it.
 */
export async function fuzzWebSocket(ctx: FuzzContext, count: number, p: Prng, controller: Terminal): Promise<void> {
  let sent = 0;
  let seenTexts = 0;
  const checkController = (after: string) => {
    for (const t of controller.texts.slice(seenTexts)) {
      if (t.frame.code === "internal") ctx.anomalies.add("internal errors", `controller after ${after}: ${excerpt(t.frame)}`);
    }
    seenTexts = controller.texts.length;
    if (controller.closeCode === 1011) ctx.anomalies.add("internal errors", `controller closed 1011 after ${after}`);
  };
  while (sent < count) {
    const choice = p.next();
    if (choice < 0.4) {
      const u = upgradeRequest(ctx, p);
      const n = nextInput(ctx, "websocket upgrade");
      sent += 1;
      const r = await tryUpgrade(u);
      countStatus(ctx, r.status);
      const what = `input #${n} upgrade ${excerpt(u.url.replace(ctx.stack.token, "<token>"), 200)} [${u.defects.join(",") || "none"}]`;
      if (r.status >= 500) ctx.anomalies.add("5xx answers", `${what} → ${r.status}`);
      if (r.status === 101 && u.defects.length > 0) ctx.anomalies.add("malformed requests accepted", what);
      if (r.internal || r.close === 1011) ctx.anomalies.add("internal errors", `${what} → close ${r.close ?? "?"}`);
    } else if (choice < 0.85 && controller.closeCode === undefined) {
      // A burst of frames through the open controller, then a look at what it answered.
      let last = "";
      for (let i = 0; i < 10 && sent < count; i++, sent++) {
        const n = nextInput(ctx, "websocket frame");
        if (p.bool(0.6)) {
          const text = badTextFrame(p);
          controller.send(text, false);
          last = `input #${n} text ${excerpt(text, 80)}`;
        } else {
          const bytes = p.bytes(p.pick([0, 1, 3, 64, 1024, 16_000]));
          controller.send(bytes, true);
          last = `input #${n} binary ${bytes.length} bytes`;
        }
      }
      await new Promise((r) => setTimeout(r, 20));
      checkController(last);
    } else {
      const frames = Math.min(5, count - sent);
      sent += frames;
      await protocolGarbage(ctx, p, frames);
    }
  }
  await new Promise((r) => setTimeout(r, 200));
  checkController("the last frame");
}

/**
 * The defects every authenticated upgrade can carry (an unknown query
 * parameter, a token in the URL, a bad ticket, bad or no credentials, a
 * foreign origin), applied for the kinds chosen; shared by the terminal and
 * the files-watch upgrades.
 */
export function upgradeDefects(
  ctx: FuzzContext,
  p: Prng,
  u: { chosen: ReadonlySet<string>; q: string[]; headers: Record<string, string>; defect: (name: string) => void },
): void {
  const { chosen, q, headers, defect } = u;
  if (chosen.has("query")) (q.push(`zz${p.string(3)}=1`), defect("query"));
  if (chosen.has("token-in-url")) (q.push(`${p.pick(["token", "access_token"])}=${ctx.stack.token}`), defect("token-in-url"));
  if (chosen.has("ticket")) (q.push(`ticket=${p.pick([`pdt_${p.string(43)}`, "x", "pdt_"])}`), defect("ticket"));
  if (chosen.has("auth")) {
    const a = p.pick([undefined, `Bearer ${p.string(30)}`, "Basic eDp4", `Bearer ${ctx.stack.token}x`]);
    if (a === undefined) delete headers.authorization;
    else headers.authorization = a;
    defect("auth");
  }
  if (chosen.has("origin")) (headers.origin = p.pick(["http://evil.example", "null", "https://x.y"]), defect("origin"));
}
