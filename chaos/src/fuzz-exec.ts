/**
 * The bad-input scenario's exec case (issue 24 item 8): what a hostile or
 * careless client does with exec, against the live fixture session. A
 * command that never exits (its timeout must end it and say so), output far
 * past the buffered cap (answered, cut, `truncated`), a client that leaves
 * mid-stream of an endless producer (the command must die), a cwd through a
 * symlink out of the workspace and one with `..` (refused), a body past its
 * bound (413) and an unknown session (404). Afterwards none of the commands
 * may still run in the session.
 */
import { api } from "./client.ts";
import type { FuzzContext } from "./fuzz-context.ts";
import { log } from "./report.ts";

interface ExecAnswer {
  status: number;
  body: { exitCode?: number | null; signal?: string | null; timedOut?: boolean; truncated?: boolean; stdout?: string; error?: { code?: string } };
}

export async function execCase(ctx: FuzzContext): Promise<void> {
  const { stack, anomalies } = ctx;
  const id = ctx.fixtures.running.id;
  const exec = (body: unknown) => api(stack.url, stack.token, "POST", `/v1/sessions/${id}/exec`, body) as Promise<ExecAnswer>;
  const accepted = (what: string, a: ExecAnswer) => anomalies.add("malformed requests accepted", `exec ${what}: ${a.status} ${JSON.stringify(a.body).slice(0, 160)}`);
  let sent = 0;

  const never = await exec({ cmd: ["sh", "-c", "trap '' TERM; sleep 3600 & while :; do sleep 1; done"], timeoutMs: 300 });
  sent += 1;
  if (never.status !== 200 || never.body.timedOut !== true) anomalies.add("requests never answered", `exec of a command that never exits: ${never.status} ${JSON.stringify(never.body).slice(0, 160)}`);

  const flood = await exec({ cmd: ["sh", "-c", "head -c 6000000 /dev/urandom"], encoding: "base64" });
  sent += 1;
  if (flood.status !== 200 || flood.body.truncated !== true) anomalies.add("requests never answered", `exec of 6 MB of output: ${flood.status} truncated=${String(flood.body.truncated)}`);

  // A client that leaves mid-stream of a producer that never stops.
  const ac = new AbortController();
  const res = await fetch(`${stack.url}/v1/sessions/${id}/exec`, {
    method: "POST",
    signal: ac.signal,
    headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json", accept: "application/x-ndjson" },
    body: JSON.stringify({ cmd: ["sh", "-c", "exec yes chaos-left"] }),
  }).catch(() => undefined);
  sent += 1;
  if (res?.body) {
    const reader = res.body.getReader();
    await reader.read().catch(() => undefined);
    ac.abort();
  } else anomalies.add("requests never answered", "exec with a streamed answer did not start");

  await exec({ cmd: ["ln", "-sfn", "/etc", "chaos-out"] });
  for (const [what, body] of [
    ["cwd through a symlink out", { cmd: ["cat", "passwd"], cwd: "chaos-out" }],
    ["cwd with ..", { cmd: ["true"], cwd: "a/../../etc" }],
    ["absolute cwd", { cmd: ["true"], cwd: "/etc" }],
    ["NUL in the command", { cmd: ["tr\0ue"] }],
    ["a runner variable", { cmd: ["true"], env: { PADDOCK_SESSION_TOKEN: "x" } }],
  ] as const) {
    const a = await exec(body);
    sent += 1;
    if (a.status !== 400) accepted(what, a);
  }
  const huge = await exec({ cmd: ["true"], stdin: "a".repeat(5 * 1024 * 1024) });
  sent += 1;
  if (huge.status !== 413) accepted("with a 5 MiB body", huge);
  const unknown = await api(stack.url, stack.token, "POST", `/v1/sessions/ses_${"z".repeat(20)}/exec`, { cmd: ["true"] });
  sent += 1;
  if (unknown.status !== 404) accepted("for an unknown session", unknown as ExecAnswer);

  // Nothing of them runs on: the timed-out loop, its orphaned sleep and the abandoned producer are gone.
  // The kill of the abandoned one is sent as its connection closes: asked again until it answers, bounded.
  let left = "";
  for (let attempt = 0; attempt < 50; attempt++) {
    const ps = await exec({ cmd: ["sh", "-c", "ps -eo args | grep -E '^(sleep 3600|yes chaos-left)' || true"] });
    left = ps.body.stdout?.trim() ?? "?";
    if (left === "") break;
  }
  if (left !== "") anomalies.add("exec processes left running", left.slice(0, 160));
  ctx.sent.set("exec hostile calls", sent);
  log("bad-input", `exec case: ${sent} hostile exec calls`);
}
