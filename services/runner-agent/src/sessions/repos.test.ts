/**
 * A session's repositories (spec.repos) on bwrap, through a real agent: git
 * runs in the session's sandbox as its uid, through its egress proxy (a
 * host not on egressAllow is refused there), after setup and before init
 * and the apps; a failing clone fails the session with git's last words;
 * a private repository's token reaches git only through its environment; a
 * cold resume does not clone again. The clone steps themselves:
 * workspace/repos.test.ts.
 */
import { chmodSync, mkdtempSync, readdirSync, readFileSync, statSync, type Dirent } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { BootEnvironment, DispatchCommand, PortableSpec, RunnerFact } from "@paddock/contracts";
import { provision } from "@paddock/bus";
import { makeSourceRepo, startGitHttpServer, startNatsServer, type GitHttpServer, type NatsServerHandle, type SourceRepo } from "@paddock/testing";
import { testHostIds } from "../sandbox/bwrap/test-sandbox.ts";
import { collectFacts, collectTerm, dispatchTo, fakeScheduler, testAgent, TEST_SANDBOX, type TestAgent } from "../testing/test-support.ts";
import type { SecretResolver } from "./secrets.ts";

const TOKEN = "tok-session-repo-sekrit-42";
let server: NatsServerHandle;
let nc: NatsConnection;
let t: TestAgent;
let facts: ReturnType<typeof collectFacts>;
let src: SourceRepo;
let http: GitHttpServer;
let privateHttp: GitHttpServer;
let counter = 0;
const nextId = () => `rp${++counter}`;

/** Every session is given GIT_TOKEN, as an environment referencing that secret would give it. */
const secrets: SecretResolver = {
  resolve: () => Promise.resolve({ GIT_TOKEN: TOKEN }),
  boot: () => Promise.resolve({ values: { GIT_TOKEN: TOKEN } }),
};

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  await provision(nc, { replicas: 1 });
  src = makeSourceRepo();
  http = await startGitHttpServer(src.root);
  privateHttp = await startGitHttpServer(src.root, { token: TOKEN });
  // Passable by a session's uid: its bwrap binds its directories from below it.
  const dataDir = mkdtempSync(join(tmpdir(), "paddock-repos-"));
  chmodSync(dataDir, 0o711);
  const ids = testHostIds(process.pid + 3_301);
  const scheduler = fakeScheduler(nc, 0);
  t = testAgent(nc, { dataDir, sandbox: { ...TEST_SANDBOX, uidFirst: ids.firstUid, uidCount: 16, netInstance: ids.instance, netPrefix: ids.prefix } }, undefined, { secrets });
  facts = collectFacts(nc, t.config.poolId, t.config.runnerId);
  await t.agent.start();
  scheduler.sub.unsubscribe();
});
afterAll(async () => {
  await t.agent.stop();
  await http.close();
  await privateHttp.close();
  await nc.drain();
  await server.stop();
});

const fact = <T extends RunnerFact["type"]>(sessionId: string, type: T, pred?: (f: Extract<RunnerFact, { type: T }>) => boolean) =>
  facts.waitFor((f) => f.sessionId === sessionId && f.type === type && (!pred || pred(f as never))) as Promise<Extract<RunnerFact, { type: T }>>;
const start = (sessionId: string, spec: PortableSpec, extra: Partial<Extract<DispatchCommand, { type: "start" }>> = {}) =>
  dispatchTo(nc, t, { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, spec, mode: "run", trigger: "initial", ...extra } as DispatchCommand);
const workspaceOf = (sessionId: string) => join(t.config.dataDir, "sessions", sessionId, "workspace");
const env = (extra: Partial<BootEnvironment> = {}): BootEnvironment => ({ environmentId: "env1", setupHash: "h1", secretRefs: ["GIT_TOKEN"], ...extra });

describe("spec.repos on bwrap", () => {
  it("clones as the session's uid through its egress proxy, after setup and before init and the apps", async () => {
    const sessionId = nextId();
    const term = collectTerm(nc, sessionId, "main");
    const url = `${http.url}/${src.name}.git`;
    await start(
      sessionId,
      { cmd: ["sh", "-c", 'echo "head=$(git -C project rev-parse HEAD) tag=$(git -C tagged rev-parse HEAD) init=$(cat init-saw)."; exit 0'], egressAllow: ["127.0.0.1"], repos: [{ url }, { url, ref: "v1", path: "tagged" }] },
      // Setup runs before the clone (its snapshot holds none), init after it.
      { environment: env({ setup: "test ! -e project && echo clean > setup-saw", init: "cat project/README.md > init-saw" }) },
    );
    expect(await fact(sessionId, "exited")).toMatchObject({ exitCode: 0 });
    expect(term.text()).toContain(`head=${src.commits.main} tag=${src.commits.first} init=second.`);
    const ws = workspaceOf(sessionId);
    // The runner keeps the directory until destroy: the clone's files are the session's uid's, not the runner's.
    const uid = statSync(ws).uid;
    expect(uid).not.toBe(process.getuid?.());
    expect(statSync(join(ws, "project", ".git", "config")).uid).toBe(uid);
    expect(readFileSync(join(ws, "setup-saw"), "utf8")).toBe("clean\n");
  });

  it("a host not on egressAllow is refused by the session's proxy: the session fails with git's words", async () => {
    const sessionId = nextId();
    await start(sessionId, { cmd: ["true"], repos: [{ url: `${http.url}/${src.name}.git` }] });
    const failed = await fact(sessionId, "failed");
    expect(failed.reason).toMatch(/^repository project: git clone failed \(exit 128\): .*403/);
  });

  it("an unknown ref fails the session with git's tail as its reason", async () => {
    const sessionId = nextId();
    await start(sessionId, { cmd: ["true"], egressAllow: ["127.0.0.1"], repos: [{ url: `${http.url}/${src.name}.git`, ref: "no-such-ref" }] });
    const failed = await fact(sessionId, "failed");
    expect(failed.reason).toMatch(/^repository project: git clone failed \(exit 128\): .*Remote branch no-such-ref not found/);
    expect(failed.reason.length).toBeLessThanOrEqual(512);
  });

  it("a private repository: the token from the environment's secret, in no file of the workspace", async () => {
    const sessionId = nextId();
    await start(sessionId, { cmd: ["sleep", "600"], egressAllow: ["127.0.0.1"], repos: [{ url: `${privateHttp.url}/${src.name}.git`, ref: "feature", secretRef: "GIT_TOKEN" }] }, { environment: env() });
    await fact(sessionId, "running");
    const ws = workspaceOf(sessionId);
    expect(readFileSync(join(ws, "project", "feature.txt"), "utf8")).toBe("feature\n");
    const basic = Buffer.from(`x-access-token:${TOKEN}`).toString("base64");
    const holding = (readdirSync(ws, { recursive: true, withFileTypes: true }) as Dirent[])
      .filter((e) => e.isFile())
      .filter((e) => {
        const bytes = readFileSync(join(e.parentPath, e.name));
        return bytes.includes(TOKEN) || bytes.includes(basic);
      });
    expect(holding).toEqual([]);
    await dispatchTo(nc, t, { type: "destroy", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1 } as DispatchCommand);
  });

  it("a cold resume keeps the restored clone and clones nothing again", async () => {
    const sessionId = nextId();
    const url = `${http.url}/${src.name}.git`;
    await start(sessionId, { cmd: ["sleep", "600"], egressAllow: ["127.0.0.1"], repos: [{ url }] });
    await fact(sessionId, "running");
    await dispatchTo(nc, t, { type: "suspend", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, requestId: "c1", warm: false } as DispatchCommand);
    const cold = await fact(sessionId, "suspended");
    if (cold.type !== "suspended" || !cold.checkpoint || !cold.sealKey) throw new Error("expected a sealed checkpoint");
    // A repository that cannot be cloned: a resume that cloned would fail.
    await start(sessionId, { cmd: ["sleep", "600"], egressAllow: [], repos: [{ url }] }, { placementGeneration: 2, trigger: "resume", restore: cold.checkpoint, restoreKey: cold.sealKey });
    await fact(sessionId, "running", (f) => f.placementGeneration === 2);
    expect(readFileSync(join(workspaceOf(sessionId), "project", "README.md"), "utf8")).toBe("second\n");
    await dispatchTo(nc, t, { type: "destroy", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 2 } as DispatchCommand);
  });
});
