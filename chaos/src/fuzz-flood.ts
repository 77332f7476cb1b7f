/**
 * Input at volume through the terminal WebSocket: a flood of tiny frames from
 * the moment a session is created, and a 1 MiB paste into a program that is
 * not reading its stdin. Every byte must reach the program, in order (checked
 * by a hash the program prints), and while the paste waits another session on
 * the runner must still echo keystrokes. A missing hash is "input lost"; an
 * echo that does not come is "runner stalled by a paste".
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { rmSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import type { Session } from "@paddock/contracts";
import { api, Terminal } from "./client.ts";
import { nextInput, type FuzzContext } from "./fuzz-context.ts";
import type { Prng } from "./prng.ts";

const FLOOD_FRAMES = 2000;
const FLOOD_FRAME_BYTES = 10;
const PASTE_BYTES = 1024 * 1024;
/** Generous: the flood is paced by the gateway's frame budget (200 per second by default). */
const DEADLINE_MS = 60_000;

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function session(ctx: FuzzContext, apps: Array<{ name: string; cmd: string[] }>): Promise<string> {
  const res = await api(ctx.stack.url, ctx.stack.token, "POST", "/v1/sessions", { spec: { apps } });
  if (res.status !== 201) throw new Error(`flood fixture create answered ${res.status}: ${JSON.stringify(res.body)}`);
  return (res.body as Session).id;
}

/** Printable bytes (no terminal control characters), different each run of a seed. */
function printable(p: Prng, size: number): Buffer {
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const out = Buffer.allocUnsafe(size);
  const seed = p.bytes(4096);
  for (let i = 0; i < size; i++) out[i] = alphabet.charCodeAt((seed[i % seed.length]! + (i >> 12)) % alphabet.length);
  return out;
}

/** Input the runners dropped on purpose (an older controller, or an unconfirmed registration): tells a lost case's cause. */
async function staleInput(ctx: FuzzContext): Promise<number> {
  let n = 0;
  for (const id of ctx.stack.members.keys()) n += (await ctx.stack.metric(id, "paddock_stale_input_total")) ?? 0;
  return n;
}

async function flood(ctx: FuzzContext): Promise<string[]> {
  const staleBefore = await staleInput(ctx);
  const frames = Array.from({ length: FLOOD_FRAMES }, (_, i) => Buffer.from(`${String(i).padStart(FLOOD_FRAME_BYTES - 1, "0")}\n`));
  const sent = Buffer.concat(frames);
  const id = await session(ctx, [{ name: "main", cmd: ["sh", "-c", `stty raw -echo; head -c ${sent.length} | sha256sum; exec sleep 600`] }]);
  const t = await Terminal.open(ctx.stack.url, ctx.stack.token, id, "mode=controller&since=all");
  for (const f of frames) {
    nextInput(ctx, "websocket flood frame");
    t.send(f, true);
  }
  const ok = await t.until((x) => x.text().includes(sha256(sent)), DEADLINE_MS);
  t.close();
  await api(ctx.stack.url, ctx.stack.token, "DELETE", `/v1/sessions/${id}`);
  if (ok) return [];
  const stale = (await staleInput(ctx)) - staleBefore;
  return [`flood: ${FLOOD_FRAMES} frames of ${FLOOD_FRAME_BYTES} bytes, the program's hash of what it read never matched (${stale} input messages dropped as stale by runners meanwhile)`];
}

async function paste(ctx: FuzzContext, p: Prng): Promise<{ lost: string[]; stalled: string[] }> {
  // The program does not read stdin until the scenario opens a fifo (one controller per session: a
  // second app's controller would supersede the paste's). The fifo is in the stack's shared dir, which
  // every session sees at the same path, also in a bwrap sandbox.
  const fifo = join(ctx.stack.obsDir, `paste-go-${process.pid}-${p.u32().toString(36)}`);
  execFileSync("mkfifo", ["-m", "0644", fifo]);
  const id = await session(ctx, [{ name: "main", cmd: ["sh", "-c", `stty raw -echo; printf 'waiting\\n'; cat '${fifo}' > /dev/null; head -c ${PASTE_BYTES} | sha256sum; exec sleep 600`] }]);
  const echoId = await session(ctx, [{ name: "main", cmd: ["cat"] }]);
  const bytes = printable(p, PASTE_BYTES);
  const lost: string[] = [];
  const stalled: string[] = [];
  const t = await Terminal.open(ctx.stack.url, ctx.stack.token, id, "mode=controller&since=all");
  const echo = await Terminal.open(ctx.stack.url, ctx.stack.token, echoId, "mode=controller&since=all");
  if (!(await t.until((x) => x.text().includes("waiting"), DEADLINE_MS))) lost.push("paste: the program never started");
  for (let at = 0; at < PASTE_BYTES; at += 16 * 1024) {
    nextInput(ctx, "websocket paste frame");
    t.send(bytes.subarray(at, at + 16 * 1024), true);
  }
  // While the paste waits unread, another session's keystroke still comes back.
  echo.send("ping\n", true);
  if (!(await echo.until((x) => x.text().includes("ping\r\nping\r\n"), DEADLINE_MS))) stalled.push("a keystroke in another session got no echo while a 1 MiB paste waited unread");
  await (await open(fifo, "w")).close();
  if (!(await t.until((x) => x.text().includes(sha256(bytes)), DEADLINE_MS))) lost.push(`paste: ${PASTE_BYTES} bytes, the program's hash of what it read never matched (close ${t.closeCode ?? "none"})`);
  for (const x of [t, echo]) x.close();
  rmSync(fifo, { force: true });
  for (const s of [id, echoId]) await api(ctx.stack.url, ctx.stack.token, "DELETE", `/v1/sessions/${s}`);
  return { lost, stalled };
}

/** Runs both cases; adds "input lost" and "runner stalled by a paste" anomalies to ctx. */
export async function floodAndPaste(ctx: FuzzContext, p: Prng): Promise<void> {
  for (const d of await flood(ctx)) ctx.anomalies.add("input lost", d);
  const pasted = await paste(ctx, p);
  for (const d of pasted.lost) ctx.anomalies.add("input lost", d);
  for (const d of pasted.stalled) ctx.anomalies.add("runner stalled by a paste", d);
}
