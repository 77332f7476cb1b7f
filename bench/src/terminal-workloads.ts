/**
 * Terminal output on three workloads (issue 30 item 1), each live to a
 * client through gateway → runner → PTY beside a direct WebSocket↔PTY bridge
 * running the same program before and after (their mean: this VM's speed
 * drifts within a minute), with each process's CPU per MB beside it:
 * long lines without a newline, newline-heavy log output, and an ANSI-heavy
 * full-screen repaint (a 80×24 coloured frame redrawn from the top, as a TUI
 * does). Every byte still goes through the TERM log and the screen tracker.
 */
import { startStack, type Stack } from "@paddock/testing";
import { startBridgeProcess } from "./baselines.ts";
import { stopStackKeepingData } from "./leftovers.ts";
import { cpuMeter, profiledServiceEnv } from "./cpu.ts";
import { figure, type Figure } from "./stats.ts";
import { drain, openWs, post } from "./terminal.ts";

/** One 80×24 frame: each row placed, coloured and filled; N of them from the top. */
const REPAINT_AWK =
  'BEGIN { s = ""; for (r = 1; r <= 24; r++) { s = s sprintf("\\033[%d;1H\\033[3%dm", r, r % 8); for (c = 0; c < 80; c++) s = s sprintf("%c", 65 + (c + r) % 26) } s = s "\\033[0m"; for (f = 0; f < n; f++) printf "\\033[H%s", s }';

/** The programs, each writing about `megabytes` MB. */
export function workloads(megabytes: number): Array<{ name: string; cmd: string[] }> {
  const bytes = megabytes * 1024 * 1024;
  return [
    { name: "long lines (no newline)", cmd: ["sh", "-c", `head -c ${bytes} /dev/zero | tr '\\0' 'a'`] },
    { name: "newline-heavy log", cmd: ["sh", "-c", `head -c ${bytes} /dev/zero | tr '\\0' 'x' | fold -w 100`] },
    // A frame is ~2,300 bytes with its escapes.
    { name: "full-screen repaint", cmd: ["awk", "-v", `n=${Math.round(bytes / 2300)}`, REPAINT_AWK] },
  ];
}

async function bridgeMBs(cmd: string[]): Promise<number> {
  const bridge = await startBridgeProcess(cmd);
  const direct = await drain(await openWs(bridge.url), false);
  await bridge.close();
  return direct.bytes / 1e6 / direct.seconds;
}

const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);

/** The three workloads on a stack of their own (the terminal bench's other figures do not share its CPU). */
export async function terminalWorkloadsBench(opts: { megabytes: number }): Promise<Figure[]> {
  // PADDOCK_BENCH_PROFILE_DIR=DIR writes V8 CPU profiles of the runner and the gateway there.
  const prof = profiledServiceEnv();
  const stack = await startStack({ validateOutgoing: false, runnerCapacity: 8, env: { gateway: prof, "runner-agent": prof } });
  try {
    return await outputWorkloads(stack, opts.megabytes);
  } finally {
    await stopStackKeepingData(stack);
  }
}

async function outputWorkloads(stack: Stack, megabytes: number): Promise<Figure[]> {
  const figures: Figure[] = [];
  for (const { name, cmd } of workloads(megabytes)) {
    const before = await bridgeMBs(cmd);
    const s = await post(stack, "/v1/sessions", { spec: { cmd } });
    const ws = await openWs(`${stack.url.replace("http", "ws")}/v1/sessions/${s.id}/terminal?since=all`, { authorization: `Bearer ${stack.token}` });
    const cpu = cpuMeter({ nats: stack.nats.process.pid, runner: stack.runners[0]?.process.pid, gateway: stack.gateway.process.pid });
    const live = await drain(ws, true);
    const used = cpu();
    const after = await bridgeMBs(cmd);
    const mb = live.bytes / 1e6;
    const liveMBs = mb / live.seconds;
    const perMb = (who: string) => ((used.seconds[who] ?? 0) * 1000) / Math.max(mb, 1e-9);
    log(`${name}: ${mb.toFixed(0)} MB in ${live.seconds.toFixed(1)} s; ${used.text}; bridge ${before.toFixed(1)} / ${after.toFixed(1)} MB/s`);
    const bench = `4 output: ${name}`;
    figures.push(
      figure({ bench, metric: `${mb.toFixed(0)} MB live to a client`, value: liveMBs, unit: "MB/s", baseline: { name: "direct bridge (mean of before and after)", value: (before + after) / 2 }, goal: "≥ 0.8x bridge", met: liveMBs >= 0.8 * ((before + after) / 2) }),
      figure({ bench, metric: "runner CPU per MB", value: perMb("runner"), unit: "ms" }),
      figure({ bench, metric: "gateway CPU per MB", value: perMb("gateway"), unit: "ms" }),
      figure({ bench, metric: "nats-server CPU per MB", value: perMb("nats"), unit: "ms" }),
    );
  }
  return figures;
}
