/**
 * The bad-input scenario's sandbox case (issue #23 item 8): a bwrap runner
 * joins the stack for it, and a hostile session on it runs the escape battery
 * (shared/testing escape-battery.ts: the data dir, another session's
 * workspace and port, service processes' environ and a kill of each, NATS
 * and the services' ops ports,
 * writes outside its workspace, its token against another session and for a
 * new token, a fork bomb). Any attempt that succeeds is an anomaly; so is the
 * hostile session's own work failing, or the victim session or the runner
 * not answering while the fork bomb holds. Afterwards the runner is cordoned,
 * so the scenarios that follow place nothing on it.
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import type { Session } from "@paddock/contracts";
import { escapeBattery, escapedOf } from "@paddock/testing";
import { api, Terminal } from "./client.ts";
import type { FuzzContext } from "./fuzz-context.ts";
import { log } from "./report.ts";

export const SANDBOX_RUNNER = "runner-bwrap";
/** Small, so the fork bomb is quick and light on a shared host (the mechanism, RLIMIT_NPROC, is the default's). */
const PROCESSES = 128;
const B_PORT = 7000;
const WAIT_MS = 60_000;

/** The bwrap runner's settings: uids, interface names and addresses of its own on this host. */
function sandboxEnv(): Record<string, string> {
  return {
    PADDOCK_SANDBOX: "bwrap",
    PADDOCK_SANDBOX_UID_FIRST: String(500_000 + (process.pid % 1_000) * 32),
    PADDOCK_SANDBOX_UID_COUNT: "32",
    PADDOCK_SANDBOX_PROCESSES: String(PROCESSES),
  };
}

function dirOf(root: string, file: string): string | undefined {
  for (const e of readdirSync(root, { withFileTypes: true })) {
    if (e.isFile() && e.name === file) return root;
    const hit = e.isDirectory() ? dirOf(join(root, e.name), file) : undefined;
    if (hit) return hit;
  }
  return undefined;
}

/** Runs the case; counts into ctx.anomalies ("sandbox escapes", "sandbox own work failed", "service stopped working"). */
export async function sandboxCase(ctx: FuzzContext): Promise<void> {
  const { stack, anomalies } = ctx;
  const call = (method: string, path: string, body?: unknown) => api(stack.url, stack.token, method, path, body);
  const failed = (what: string) => anomalies.add("sandbox own work failed", what);
  stack.defineRunner(SANDBOX_RUNNER, sandboxEnv());
  await stack.startWithRetries(SANDBOX_RUNNER);
  const env = await call("POST", "/v1/environments", { name: `sandbox-${ctx.seed}`, requirements: { capabilities: ["sandbox:bwrap"] } });
  if (env.status !== 201) throw new Error(`sandbox environment: ${env.status} ${JSON.stringify(env.body)}`);
  const environmentId = (env.body as { id: string }).id;
  const create = async (script: string): Promise<Session> => {
    const res = await call("POST", "/v1/sessions", { environmentId, spec: { cmd: ["bash", "-c", script] } });
    if (res.status !== 201) throw new Error(`sandbox session: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body as Session;
  };
  const attach = (id: string) => Terminal.open(stack.url, stack.token, id, "mode=controller&since=all");
  const ids: string[] = [];
  try {
    const b = await create(
      [
        `echo b-private > b-private; socat TCP-LISTEN:${B_PORT},reuseaddr,fork SYSTEM:'echo from-b' &`,
        "echo \"B-IP:$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1).\"",
        'echo B-READY.; while read -r l; do echo "B-ECHO:$l."; done',
      ].join("\n"),
    );
    ids.push(b.id);
    const bTerm = await attach(b.id);
    if (!(await bTerm.until((t) => t.text().includes("B-READY."), WAIT_MS))) throw new Error(`the victim session did not start: ${bTerm.text().slice(-300)}`);
    const bWorkspace = dirOf(stack.runnerDir(SANDBOX_RUNNER), "b-private") ?? "";
    const pids = [...stack.members.keys()].filter((id) => stack.isUp(id)).map((id) => stack.pid(id));
    const script = escapeBattery({
      dataDir: stack.dataDir,
      runnerDataDir: stack.runnerDir(SANDBOX_RUNNER),
      other: { sessionId: b.id, workspace: bWorkspace, address: /B-IP:([\d.]+)\./.exec(bTerm.text())?.[1] ?? "0.0.0.0", port: B_PORT },
      servicePids: pids,
      natsPort: Number(new URL(stack.natsUrls.split(",")[0]?.replace("nats://", "http://") ?? "").port),
      hostAddresses: [],
      hostPorts: [...stack.members.keys()].flatMap((id) => stack.opsPort(id) ?? []),
      forkBomb: true,
    });
    const a = await create(script);
    ids.push(a.id);
    const aTerm = await attach(a.id);
    if (!(await aTerm.until((t) => t.text().includes("FORK-HOLDING."), WAIT_MS))) throw new Error(`the hostile session did not reach its fork bomb: ${aTerm.text().slice(-300)}`);
    // While it holds every process it may: the victim answers, the runner is healthy.
    bTerm.send("still-here\n", true);
    if (!(await bTerm.until((t) => t.text().includes("B-ECHO:still-here."), WAIT_MS))) anomalies.add("service stopped working", "a bwrap session did not echo while another one held its process limit");
    const health = await fetch(`http://127.0.0.1:${String(stack.opsPort(SANDBOX_RUNNER))}/healthz`).catch(() => undefined);
    if (health?.status !== 200) anomalies.add("service stopped working", `the bwrap runner's /healthz answered ${String(health?.status)} during a fork bomb`);
    aTerm.send("release\n", true);
    if (!(await aTerm.until((t) => t.text().includes("BATTERY-DONE."), WAIT_MS))) failed("the hostile session did not finish after releasing its processes");
    const out = aTerm.text();
    for (const e of escapedOf(out)) anomalies.add("sandbox escapes", e.slice(0, 160));
    if (!out.includes("OWN:workspace=own-work")) failed("writing its workspace");
    if (!/OWN:self=200/.test(out)) failed("reading itself through $PADDOCK_URL with $PADDOCK_TOKEN");
    if (!/FORK-LIMIT:\d+/.test(out)) failed("no fork limit reached");
    ctx.sent.set("sandbox escape attempts", (out.match(/^(HELD|ESCAPED):/gm) ?? []).length);
    log("bad-input", `sandbox case: ${String(ctx.sent.get("sandbox escape attempts"))} escape attempts from a bwrap session, ${String(escapedOf(out).length)} succeeded`);
    aTerm.close();
    bTerm.close();
  } finally {
    for (const id of ids) await call("DELETE", `/v1/sessions/${id}`);
    await call("DELETE", `/v1/environments/${environmentId}`);
    await call("POST", `/v1/runners/${SANDBOX_RUNNER}/cordon`, {});
  }
}
