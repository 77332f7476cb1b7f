import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import pty from "@lydell/node-pty";
import { WebSocketServer } from "ws";
import { spawnBenchScript } from "./bench-process.ts";

/** Runs `total` async operations with at most `inflight` at once; returns ops/s. */
async function rate(total: number, inflight: number, op: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (next < total) await op(next++);
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  return total / ((performance.now() - start) / 1000);
}

/** Raw KV compare-and-set throughput on the same server (64 in flight, one key each). */
export async function kvCasOpsPerSec(nc: NatsConnection, total: number): Promise<number> {
  const kv = await new Kvm(nc).create("bench-cas", { history: 1 });
  const revs = new Map<number, number>();
  const keys = 64;
  for (let k = 0; k < keys; k++) revs.set(k, await kv.put(`k${k}`, "0"));
  const ops = await rate(total, keys, async (i) => {
    const k = i % keys;
    revs.set(k, await kv.update(`k${k}`, String(i), revs.get(k) ?? 0));
  });
  await kv.destroy();
  return ops;
}

/** Acked publishes of 256 B (256 in flight) to a scratch stream on the same server. */
export async function ackedPublishesPerSec(nc: NatsConnection, total: number): Promise<number> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "BENCH_PUB", subjects: ["bench.pub.>"] });
  const js = jetstream(nc);
  const payload = new Uint8Array(256);
  const ops = await rate(total, 256, async (i) => js.publish(`bench.pub.${i % 16}`, payload));
  await jsm.streams.delete("BENCH_PUB");
  return ops;
}

/** Spawn-to-first-output of the same command in a bare PTY, in ms per sample. */
export async function barePtySpawnMs(cmd: string[], samples: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const start = performance.now();
    await new Promise<void>((resolve) => {
      const p = pty.spawn(cmd[0] ?? "sh", cmd.slice(1), { cols: 80, rows: 24 });
      const d = p.onData(() => {
        out.push(performance.now() - start);
        d.dispose();
        p.kill();
        resolve();
      });
    });
  }
  return out;
}

/** A running direct bridge: where clients connect, and how to stop it. */
export interface Bridge {
  url: string;
  close(): Promise<void>;
}

/**
 * A direct WebSocket-to-PTY bridge (one PTY per socket, no durability), run
 * in the caller's process: the client and the bridge share one event loop,
 * so no process wake-up separates them. Printed beside the baseline, which
 * is the same bridge in its own process (startBridgeProcess).
 */
export async function startBridge(cmd: string[]): Promise<Bridge> {
  const server: Server = createServer();
  const wss = new WebSocketServer({ server });
  wss.on("connection", (ws) => {
    const p = pty.spawn(cmd[0] ?? "sh", cmd.slice(1), { cols: 80, rows: 24 });
    p.onData((d) => ws.send(Buffer.from(d)));
    p.onExit(() => ws.close(1000));
    ws.on("message", (data: Buffer) => p.write(data.toString()));
    ws.on("close", () => p.kill());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        server.close(() => r());
      }),
  };
}

/**
 * The direct bridge in its own OS process, ttyd-style: the baseline the
 * terminal path is compared against. Like the gateway, it is another process
 * than the client, so each message to or from it wakes a process.
 */
export async function startBridgeProcess(cmd: string[]): Promise<Bridge> {
  const child = spawnBenchScript("bridge-main.ts", [JSON.stringify(cmd)]);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const end = out.indexOf("\n");
      if (end >= 0) resolve(out.slice(0, end).trim());
    });
    void exited.then(() => reject(new Error("bridge process exited before printing its URL")));
  });
  return {
    url,
    close: async () => {
      child.stdin.end();
      await exited;
    },
  };
}
