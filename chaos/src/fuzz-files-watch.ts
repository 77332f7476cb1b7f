/**
 * Malformed files watch upgrades (GET /v1/sessions/:id/files/watch, issue 24
 * item 8): bad ids, paths out of the workspace (`..`, absolute, NUL,
 * backslash, the fixture's missing paths), unknown query keys, tokens in the
 * URL, bad tickets and tokens, foreign origins; and frames sent on an
 * accepted socket (it takes none). A 5xx answer, a defective request
 * accepted, or a 1011 close is an anomaly.
 */
import WebSocket from "ws";
import { countStatus, excerpt, nextInput, type FuzzContext } from "./fuzz-context.ts";
import { badId, encode, nastyString } from "./fuzz-values.ts";
import type { Prng } from "./prng.ts";
import { upgradeDefects } from "./fuzz-ws.ts";

interface Upgrade {
  url: string;
  headers: Record<string, string>;
  defects: string[];
}

const BAD_PATHS = ["..", "../etc", "a/../../x", "/etc", "/", "a\\b", "a%00b", "x".repeat(2000)];

function upgradeRequest(ctx: FuzzContext, p: Prng): Upgrade {
  const f = ctx.fixtures;
  const defects: string[] = [];
  const defect = (name: string) => defects.push(name);
  const id = p.bool(0.2) ? (defect("id"), encode(badId(p))) : p.pick([f.running.id, f.dead.id, `ses_${p.string(20)}`]);
  const q: string[] = [];
  const headers: Record<string, string> = { authorization: `Bearer ${ctx.stack.token}` };
  const kinds = ["path", "query", "token-in-url", "ticket", "auth", "origin"];
  // Every request carries a defect: an accepted watch is fine, but this scenario is about refusals.
  const chosen = new Set(kinds.filter(() => p.bool(0.3)));
  if (chosen.size === 0 && defects.length === 0) chosen.add(p.pick(kinds));
  if (chosen.has("path")) {
    const bad = p.pick([...BAD_PATHS, nastyString(p)]);
    q.push(`path=${bad === "a%00b" ? bad : encode(bad)}`);
    // A nasty string may be a fine relative path (then 404 or 101): only the fixed ones are sure defects.
    if (BAD_PATHS.includes(bad)) defect("path");
  }
  upgradeDefects(ctx, p, { chosen, q, headers, defect });
  return { url: `${ctx.stack.url.replace(/^http/, "ws")}/v1/sessions/${id}/files/watch?${q.join("&")}`, headers, defects };
}

/** One upgrade; an accepted socket is sent a few frames it must refuse (1003), then closed. */
function tryUpgrade(u: Upgrade, p: Prng): Promise<{ status: number; close?: number }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(u.url, { headers: u.headers });
    const timer = setTimeout(() => ws.terminate(), 5_000);
    ws.on("unexpected-response", (_req, res) => {
      clearTimeout(timer);
      res.resume();
      ws.terminate();
      resolve({ status: res.statusCode ?? 0 });
    });
    ws.on("open", () => {
      try {
        ws.send(p.bool() ? p.bytes(p.int(0, 2000)) : JSON.stringify({ type: "change", path: "../x", kind: "create" }), { binary: p.bool() });
      } catch {
        ws.close();
      }
      setTimeout(() => ws.close(), 200).unref();
    });
    ws.on("close", (code) => {
      clearTimeout(timer);
      resolve({ status: 101, close: code });
    });
    ws.on("error", () => undefined);
  });
}

/** Sends `count` malformed files watch upgrades. */
export async function fuzzFilesWatch(ctx: FuzzContext, count: number, p: Prng): Promise<void> {
  for (let sent = 0; sent < count; sent++) {
    const u = upgradeRequest(ctx, p);
    const n = nextInput(ctx, "websocket files watch");
    const r = await tryUpgrade(u, p);
    countStatus(ctx, r.status);
    const what = `input #${n} files watch ${excerpt(u.url.replace(ctx.stack.token, "<token>"), 200)} [${u.defects.join(",") || "none"}]`;
    if (r.status >= 500) ctx.anomalies.add("5xx answers", `${what} → ${r.status}`);
    if (r.status === 101 && u.defects.length > 0) ctx.anomalies.add("malformed requests accepted", what);
    if (r.close === 1011) ctx.anomalies.add("internal errors", `${what} → close 1011`);
  }
}
