import { readFileSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import WebSocket from "ws";
import type { Session } from "@paddock/contracts";
import { startStack, type ServiceProcess, type Stack } from "@paddock/testing";
import { figure, type Figure } from "./stats.ts";
import { stopStackKeepingData } from "./leftovers.ts";

/** Resident set size of a process, in MB (from /proc: the kernel's figure, not the heap's). */
export function rssMb(pid: number | undefined): number {
  const status = readFileSync(`/proc/${pid ?? 0}/status`, "utf8");
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

function mb(svc: ServiceProcess): number {
  return rssMb(svc.process.pid);
}

async function create(stack: Stack, cmd: string[]): Promise<Session> {
  const res = await fetch(`${stack.url}/v1/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" },
    body: JSON.stringify({ spec: { cmd } }),
  });
  return (await res.json()) as Session;
}

/**
 * Benchmark 7: gateway RSS with N attached clients, and runner-agent RSS per
 * idle session, each against the same process's RSS before the load.
 */
export async function memoryBenches(opts: { clients: number; idleSessions: number }): Promise<Figure[]> {
  const stack = await startStack({ validateOutgoing: false, runnerCapacity: opts.idleSessions + 8 });
  const nc = await connect({ servers: stack.nats.url });
  try {
    const runner = stack.runners[0];
    if (!runner) throw new Error("no runner");
    const runnerBefore = mb(runner);
    const kv = await new Kvm(nc).open("sessions");
    let running = 0;
    let allRunning!: () => void;
    const done = new Promise<void>((r) => (allRunning = r));
    const watch = await kv.watch({ key: "default.>" });
    void (async () => {
      for await (const e of watch) if (e.operation === "PUT" && e.json<Session>().state === "running" && ++running === opts.idleSessions) allRunning();
    })();
    const sessions: Session[] = [];
    for (let i = 0; i < opts.idleSessions; i++) sessions.push(await create(stack, ["sleep", "600"]));
    await done;
    watch.stop();
    const perSession = (mb(runner) - runnerBefore) / opts.idleSessions;

    const gatewayBefore = mb(stack.gateway);
    // Spread over the sessions: the gateway caps attachments per session.
    const sockets = await Promise.all(
      Array.from(
        { length: opts.clients },
        (_, i) =>
          new Promise<WebSocket>((resolve, reject) => {
            const target = sessions[i % sessions.length];
            const ws = new WebSocket(`${stack.url.replace("http", "ws")}/v1/sessions/${target?.id ?? ""}/terminal?since=screen`, {
              headers: { authorization: `Bearer ${stack.token}` },
            });
            ws.once("message", () => resolve(ws));
            ws.once("error", reject);
          }),
      ),
    );
    const gatewayAfter = mb(stack.gateway);
    for (const ws of sockets) ws.close();
    return [
      figure({ bench: "7 memory", metric: `gateway RSS, ${opts.clients} attached clients`, value: gatewayAfter, unit: "MB", baseline: { name: "gateway idle", value: gatewayBefore }, goal: "≤ 200 MB (1,000 clients)", met: gatewayAfter <= 200 }),
      figure({ bench: "7 memory", metric: `runner-agent RSS per idle session (${opts.idleSessions})`, value: perSession, unit: "MB", baseline: { name: "runner idle", value: runnerBefore }, goal: "≤ 2 MB", met: perSession <= 2 }),
    ];
  } finally {
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}
