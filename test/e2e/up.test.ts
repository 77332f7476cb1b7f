/**
 * The README's first quick-start command: `npm run up` brings the whole
 * system up on this machine and prints how to reach it; Ctrl-C stops it all.
 * (The bootstrap in front of it only installs; here the tools are present.)
 *
 * One real `up` process serves the whole file, in order: its embedded NATS
 * admits only the principals it wrote credentials for (0600 files), the
 * observer reads AUDIT and nothing else, its PADDOCK_* variables reach the
 * services, a killed service or nats-server comes back and the API with it,
 * and on SIGINT a service that ignores SIGTERM is killed after the grace period.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, watch } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { readNatsCredentials } from "@paddock/config";
import { connectAs, repoRoot } from "@paddock/testing";
import { startUsageObserver } from "../../examples/usage-observer.ts";
import { api, sessionOf, Terminal } from "./helpers.ts";
import { denied } from "./nats-denied.ts";

const STOP_GRACE_MS = 1_000;
/** Five processes start one after another; on a loaded 2-core machine that takes a while. */
const START_TIMEOUT_MS = 180_000;
/** Every `up` this file started (and its data dir), ended and removed after the file. */
const started: Array<{ child: ChildProcess; dataDir: string }> = [];

interface Up {
  child: ChildProcess;
  exited: Promise<number | null>;
  printed: Record<string, string>;
  dataDir: string;
  /** Resolves with the first line of up's stderr matching re and accept (already printed or future). */
  line(re: RegExp, accept?: (m: RegExpExecArray) => boolean): Promise<RegExpExecArray>;
}

function startUp(env: Record<string, string>): Promise<Up> {
  const parent = mkdtempSync(join(tmpdir(), "paddock-up-"));
  // Passable, as the data dir's parents must be for a bwrap runner's sessions (each its own uid) to bind their directories.
  chmodSync(parent, 0o711);
  const dataDir = join(parent, "data");
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/up.ts", "--http-port", "0", "--data-dir", dataDir, "--stop-grace-ms", String(STOP_GRACE_MS)], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group, so a failed test can end up and everything it started at once.
    detached: true,
  });
  started.push({ child, dataDir });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stderr! }).on("line", (l) => {
    lines.push(l);
    for (const w of waiters.splice(0)) w();
  });
  const line = (re: RegExp, accept: (m: RegExpExecArray) => boolean = () => true) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const check = () => {
        for (const l of lines) {
          const m = re.exec(l);
          if (m && accept(m)) return resolve(m);
        }
        waiters.push(check);
      };
      void exited.then((code) => reject(new Error(`up exited (${code}) before printing ${String(re)}:\n${lines.join("\n")}`)));
      check();
    });
  const printed: Record<string, string> = {};
  return new Promise<Up>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (l) => {
      const m = /^(PADDOCK_[A-Z_]+)=(.+)$/.exec(l);
      if (m?.[1] && m[2]) printed[m[1]] = m[2];
      if (printed.PADDOCK_OBSERVER_CREDS) resolve({ child, exited, printed, dataDir, line });
    });
    void exited.then((code) => reject(new Error(`up exited (${code}) before printing its URL:\n${lines.join("\n")}`)));
  });
}

/** Resolves once `file` gains a line (after its first `from` bytes) that pred accepts: fs.watch, no polling. */
function fileLine(file: string, from: number, pred: (line: string) => boolean): Promise<void> {
  return new Promise((resolve) => {
    const watcher = watch(file);
    const check = () => {
      if (readFileSync(file, "utf8").slice(from).split("\n").some(pred)) {
        watcher.close();
        resolve();
      }
    };
    watcher.on("change", check);
    check();
  });
}

const pidOf = (m: RegExpExecArray) => Number(m[1]);
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** A session through the API, end to end: created, run on the runner, output read back. */
async function runsASession(up: Up, text: string): Promise<void> {
  expect(await sessionOutput(up, `echo ${text}`)).toContain(text);
}

/** What a session running script printed, to its end. */
async function sessionOutput(up: Up, script: string): Promise<string> {
  const url = up.printed.PADDOCK_URL ?? "";
  const token = up.printed.PADDOCK_TOKEN ?? "";
  const created = await api(url, token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", script] } });
  expect(created.status).toBe(201);
  const term = await Terminal.open(url, token, sessionOf(created).id, "since=all");
  await term.closed;
  return term.output();
}

describe("npm run up", { timeout: 120_000 }, () => {
  let up: Up;
  const conns: NatsConnection[] = [];
  beforeAll(async () => {
    up = await startUp({ PADDOCK_RUNNER_CAPABILITIES: "passed-through" });
  }, START_TIMEOUT_MS);
  afterAll(async () => {
    for (const nc of conns) await nc.close().catch(() => undefined);
    for (const s of started) {
      // Its process group: up and whatever it started (they share it).
      if (s.child.exitCode === null && s.child.signalCode === null && s.child.pid) process.kill(-s.child.pid, "SIGKILL");
      rmSync(join(s.dataDir, ".."), { recursive: true, force: true });
    }
  });

  it("prints PADDOCK_URL, PADDOCK_TOKEN, PADDOCK_NATS_URL and PADDOCK_OBSERVER_CREDS, and serves a session", async () => {
    expect(up.printed.PADDOCK_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(up.printed.PADDOCK_TOKEN).toMatch(/^pdk_dev_[0-9a-f]+$/);
    expect(up.printed.PADDOCK_NATS_URL).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(up.printed.PADDOCK_OBSERVER_CREDS).toBe(join(up.dataDir, "creds", "observer.json"));
    await runsASession(up, "up-works");
    expect((await api(up.printed.PADDOCK_URL ?? "", undefined, "GET", "/v1/sessions")).status).toBe(401);
  });

  it("runs sessions in bwrap, where the data dir with the dev token, keys and credentials is out of their sight", async () => {
    const token = readFileSync(join(up.dataDir, "dev-token"), "utf8").trim();
    const key = readFileSync(join(up.dataDir, "secrets-key"), "utf8").trim();
    const d = up.dataDir;
    const out = await sessionOutput(up, `id -u; cat ${d}/dev-token ${d}/secrets-key ${d}/creds/*.json ${d}/nats/* 2>&1; ls -1a ${d} ${d}/creds ${d}/runner-local-1/sessions 2>&1; echo end-of-probe`);
    expect(out).toContain("end-of-probe");
    expect(Number(/^(\d+)\r?$/m.exec(out)?.[1])).toBeGreaterThan(0);
    expect(out).not.toContain(token);
    expect(out).not.toContain(key);
    expect(out).not.toContain("password");
    // Not one name listed (the errors name what the script asked for; a listing would put a name on a line of its own).
    const listed = out.split(/\r?\n/);
    for (const name of ["dev-token", "secrets-key", "session-token-secret", "observer.json", "logs", "nats"]) expect(listed).not.toContain(name);
    expect(out).toMatch(/No such file or directory|Permission denied/);
  });

  it("refuses an anonymous NATS client and a wrong password; credentials are 0600 files in a data dir no one else may list", async () => {
    const url = up.printed.PADDOCK_NATS_URL ?? "";
    await expect(connect({ servers: url, reconnect: false })).rejects.toThrow(/authorization violation/i);
    await expect(connect({ servers: url, user: "scheduler", pass: "guess", reconnect: false })).rejects.toThrow(/authorization violation/i);
    // Passable (0711): a bwrap runner's sessions bind their directories from below it; nothing in it is anyone else's to read.
    expect(statSync(up.dataDir).mode & 0o777).toBe(0o711);
    const credsDir = join(up.dataDir, "creds");
    expect(statSync(credsDir).mode & 0o077).toBe(0);
    const files = readdirSync(credsDir).sort();
    expect(files).toEqual(["event-recorder.json", "gateway.json", "observer.json", "provisioner.json", "runner-7-default-local-1.json", "scheduler.json"]);
    for (const f of files) expect(statSync(join(credsDir, f)).mode & 0o077).toBe(0);
    // The services got files, never the secrets: no password, key or token in their environment or logs.
    const secrets = [
      ...files.map((f) => readNatsCredentials(join(credsDir, f)).password),
      ...["dev-token", "secrets-key", "session-token-secret"].map((f) => readFileSync(join(up.dataDir, f), "utf8").trim()),
    ];
    for (const f of ["dev-token", "secrets-key", "session-token-secret"]) expect(statSync(join(up.dataDir, f)).mode & 0o077).toBe(0);
    // The nats-server config holds every password: it is private too, and so is its directory.
    const natsPid = pidOf(await up.line(/^up: nats-server started \(pid (\d+)\)$/));
    const natsConf = readFileSync(`/proc/${String(natsPid)}/cmdline`, "utf8").split("\0")[2] ?? "";
    expect(readFileSync(natsConf, "utf8")).toContain("authorization {");
    expect(statSync(natsConf).mode & 0o077).toBe(0);
    expect(statSync(dirname(natsConf)).mode & 0o077).toBe(0);
    const logs = readdirSync(join(up.dataDir, "logs")).map((f) => readFileSync(join(up.dataDir, "logs", f), "utf8")).join("");
    for (const name of ["scheduler", "event-recorder", "gateway", "runner-local-1"]) {
      const pid = pidOf(await up.line(new RegExp(`^up: ${name} started \\(pid (\\d+)\\)$`)));
      const environ = readFileSync(`/proc/${String(pid)}/environ`, "utf8");
      expect(environ).toContain("PADDOCK_NATS_CREDS_FILE=");
      for (const secret of secrets) {
        expect(environ).not.toContain(secret);
        expect(logs).not.toContain(secret);
      }
    }
  });

  it("the observer credentials consume AUDIT through their own durable and cannot publish, subscribe or read anything else", async () => {
    const creds = readNatsCredentials(up.printed.PADDOCK_OBSERVER_CREDS ?? "");
    expect(creds.user).toBe("observer");
    const nc = await connectAs(up.printed.PADDOCK_NATS_URL ?? "", creds.user, creds.password);
    conns.push(nc);
    let applied: () => void = () => {};
    const someApplied = new Promise<void>((r) => (applied = r));
    const observer = await startUsageObserver({ nc, durable: "up-billing", workspaces: ["default"], onTotals: () => applied() });
    await someApplied; // the session of the first test ended: its events carry usage
    expect(observer.totals.has("default")).toBe(true);
    await observer.stop();

    // The example itself, as a user runs it with what up printed.
    const example = spawn(process.execPath, ["--import", "tsx", "examples/usage-observer.ts", "--nats", up.printed.PADDOCK_NATS_URL ?? "", "--durable", "up-example", "--workspace", "default"], {
      cwd: repoRoot,
      env: { ...process.env, PADDOCK_OBSERVER_CREDS: up.printed.PADDOCK_OBSERVER_CREDS ?? "" },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exampleExited = new Promise<void>((r) => example.once("exit", () => r()));
    const firstTotals = await new Promise<string>((resolve, reject) => {
      createInterface({ input: example.stdout! }).once("line", resolve);
      void exampleExited.then(() => reject(new Error("usage-observer exited before printing totals")));
    });
    expect(Object.keys(JSON.parse(firstTotals) as object)).toEqual(["default"]);
    example.kill("SIGTERM");
    await exampleExited;

    const jsm = await jetstreamManager(nc);
    const violation = /permissions violation/i;
    expect(await denied(nc, "paddock.api.v1.sessions.create", () => nc.publish("paddock.api.v1.sessions.create", "{}"))).toMatch(violation);
    expect(await denied(nc, "paddock.audit.default.session.forged", () => jetstream(nc).publish("paddock.audit.default.session.forged", "{}", { timeout: 5_000 }))).toMatch(violation);
    expect(await denied(nc, "paddock.>", () => nc.subscribe("paddock.>"))).toMatch(violation);
    expect(await denied(nc, "$JS.API.DIRECT.GET.KV_sessions", () => jsm.direct.getMessage("KV_sessions", { last_by_subj: "$KV.sessions.default.x" }))).toMatch(violation);
    expect(await denied(nc, "$JS.API.STREAM.MSG.GET.KV_secrets", () => jsm.streams.getMessage("KV_secrets", { seq: 1 }))).toMatch(violation);
    expect(await denied(nc, "$JS.API.CONSUMER.CREATE.TERM", () => jsm.consumers.add("TERM", { durable_name: "peek" }))).toMatch(violation);
    expect(await denied(nc, "$JS.API.STREAM.PURGE.AUDIT", () => jsm.streams.purge("AUDIT"))).toMatch(violation);
    expect(await denied(nc, "$JS.API.CONSUMER.DELETE.AUDIT.up-billing", () => jsm.consumers.delete("AUDIT", "up-billing"))).toMatch(violation);
  });

  it("passes its own PADDOCK_* variables through to the services", async () => {
    const r = await api(up.printed.PADDOCK_URL ?? "", up.printed.PADDOCK_TOKEN, "GET", "/v1/runners");
    expect(r.status).toBe(200);
    expect((r.body as { runners: Array<{ id: string; capabilities: string[] }> }).runners).toEqual([expect.objectContaining({ id: "local-1", capabilities: expect.arrayContaining(["passed-through", "sandbox:bwrap"]) })]);
  });

  it("restarts a service killed with SIGKILL (logged), and the API works again", async () => {
    const before = pidOf(await up.line(/^up: scheduler started \(pid (\d+)\)$/));
    process.kill(before, "SIGKILL");
    await up.line(/^up: scheduler exited \(signal SIGKILL\); restarting in \d+ms \(attempt 1\)$/);
    const after = pidOf(await up.line(/^up: scheduler started \(pid (\d+)\)$/, (m) => pidOf(m) !== before));
    expect(alive(after)).toBe(true);
    await runsASession(up, "after-scheduler-restart");
  });

  it("restarts a killed nats-server on the same port and store, and the API recovers", async () => {
    const natsPid = pidOf(await up.line(/^up: nats-server started \(pid (\d+)\)$/));
    const logs = ["gateway", "scheduler", "runner-local-1"].map((n) => join(up.dataDir, "logs", `${n}.log`));
    const sizes = logs.map((f) => (existsSync(f) ? statSync(f).size : 0));
    process.kill(natsPid, "SIGKILL");
    await up.line(/^up: nats-server exited \(signal SIGKILL\); restarting in \d+ms/);
    await up.line(/^up: nats-server started \(pid (\d+)\)$/, (m) => pidOf(m) !== natsPid);
    // Same port: each service reconnects to the URL it was given.
    await Promise.all(logs.map((f, i) => fileLine(f, sizes[i] ?? 0, (l) => l.includes('"nats":"reconnect"'))));
    // Same store: the observer's durable survived.
    const creds = readNatsCredentials(up.printed.PADDOCK_OBSERVER_CREDS ?? "");
    const nc = await connectAs(up.printed.PADDOCK_NATS_URL ?? "", creds.user, creds.password);
    conns.push(nc);
    expect((await (await jetstreamManager(nc)).consumers.info("AUDIT", "up-billing")).name).toBe("up-billing");
    await runsASession(up, "after-nats-restart");
  });

  it("on SIGINT stops everything and exits 0; a service that ignores SIGTERM is killed after the grace period", async () => {
    const runner = pidOf(await up.line(/^up: runner-local-1 started \(pid (\d+)\)$/));
    // A stopped process cannot act on SIGTERM: a wedged runner.
    process.kill(runner, "SIGSTOP");
    up.child.kill("SIGINT");
    await up.line(new RegExp(`^up: runner-local-1 did not exit within ${STOP_GRACE_MS}ms of SIGTERM; killing it \\(pid ${runner}\\)$`));
    expect(await up.exited).toBe(0);
    expect(alive(runner)).toBe(false);
  });
});
