/**
 * OCI images as a session's root through the real stack (issue 23 item 6): a
 * registry on loopback (docker-registry, behind a proxy that records what
 * reaches it) serves a busybox image; a bwrap runner pulls it, unpacks it and
 * roots a session in it (the image's files, none of the host's), with the
 * workspace writable inside. A second session starts from the cache (no blob
 * fetched again), and is placed on the bwrap runner although a roomier
 * process runner is there (image sessions require `image:oci`). A missing
 * image fails the session with a clear reason. An image whose config sets
 * Env, WorkingDir, User, Entrypoint and Cmd: its Env reaches the app under
 * Paddock's own variables, its PATH finds its tools, a session with no cmd
 * runs its Entrypoint and Cmd, and the cwd and uid stay the session's.
 * Malformed references are refused at the API, before any placement.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage, pushImage } from "../../shared/oci/src/index.ts";
import { busyboxLayer, startRegistry, startRegistryProxy, startStack, untilSession, type RegistryHandle, type RegistryProxy, type Stack } from "@paddock/testing";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { api, stackClient } from "./helpers.ts";

// Clear of the ranges other tests take (testHostIds: 150,000-230,000; sandbox-bwrap.test.ts: 300,000-364,000).
const UID_FIRST = 400_000 + (process.pid % 1_000) * 32;
let registry: RegistryHandle;
let proxy: RegistryProxy;
let stack: Stack;
let nc: NatsConnection;
let image: string;
let configured: string;

/** Prints what the session sees of the image's config, runs the image's own tool through PATH, then keeps running. */
const CONFIG_PROBE = [
  'echo "from-image=$FROM_IMAGE. path=$PATH. home=$HOME. lang=$LANG. term=$TERM."',
  'echo "forged-url=$( [ "$PADDOCK_URL" = http://forged.example ] && echo yes || echo no )."',
  'echo "cwd=$(pwd). uid=$(/bin/busybox id -u)."',
  "probe-tool",
  "echo DONE.",
  "exec /bin/busybox sleep 600",
].join("\n");

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startRegistryProxy(registry.url);
  const built = buildImage({ layers: [busyboxLayer(), [{ path: "etc", type: "dir" }, { path: "etc/only-in-image", type: "file", content: "from the image\n" }]], gzip: true });
  await pushImage({ baseUrl: registry.url, name: "paddock/busybox" }, "1", built);
  image = `${proxy.host}/paddock/busybox:1`;
  const withConfig = buildImage({
    layers: [busyboxLayer(), [{ path: "opt", type: "dir" }, { path: "opt/tools", type: "dir" }, { path: "opt/tools/bin", type: "dir" }, { path: "opt/tools/bin/probe-tool", type: "file", mode: 0o755, content: "#!/bin/sh\necho \"tool-ran=$0.\"\n" }]],
    gzip: true,
    env: ["PATH=/opt/tools/bin:/bin", "FROM_IMAGE=yes", "HOME=/root", "TERM=dumb", "LANG=en_US.UTF-8", "PADDOCK_URL=http://forged.example"],
    workingDir: "/opt",
    user: "1234:1234",
    entrypoint: ["/bin/busybox", "sh", "-c"],
    cmd: [CONFIG_PROBE],
  });
  await pushImage({ baseUrl: registry.url, name: "paddock/configured" }, "1", withConfig);
  configured = `${proxy.host}/paddock/configured:1`;
  stack = await startStack({
    env: {
      "runner-agent": {
        PADDOCK_SANDBOX: "bwrap",
        PADDOCK_SANDBOX_UID_FIRST: String(UID_FIRST),
        PADDOCK_SANDBOX_UID_COUNT: "32",
        PADDOCK_IMAGE_INSECURE_REGISTRIES: proxy.host,
      },
    },
  });
  nc = await connect({ servers: stack.nats.url });
});
afterAll(async () => {
  await nc?.drain();
  await stack?.stop();
  await proxy?.stop();
  await registry?.stop();
});

const { post, createSession, outputOf } = stackClient(() => stack);



/** What the session reports from inside the image, then it keeps running. */
const PROBE = [
  'echo "marker=$(/bin/busybox cat /etc/only-in-image)."',
  "if [ -e /usr/bin/node ]; then echo NODE:present; else echo NODE:absent; fi",
  'echo "cwd=$(pwd)."',
  "echo in-workspace > written && echo \"read=$(/bin/busybox cat /home/workspace/written).\"",
  "echo DONE.",
  "exec /bin/busybox sleep 600",
].join("\n");

const blobGets = () => proxy.forwarded.filter((r) => r.startsWith("GET ") && r.includes("/blobs/")).length;

describe("a session whose environment names an image, on a bwrap runner", () => {
  let envId: string;

  it("reports image:oci in its capabilities", async () => {
    const res = await api(stack.url, stack.token, "GET", "/v1/runners");
    const runners = (res.body as { runners: Array<{ id: string; capabilities: string[] }> }).runners;
    expect(runners.find((r) => r.id === "runner-1")?.capabilities).toEqual(expect.arrayContaining(["sandbox:bwrap", "image:oci"]));
  });

  it("runs in the image's root, not the host's, and writes its workspace", async () => {
    const env = await post("/v1/environments", { name: "busybox", image });
    expect(env.status).toBe(201);
    envId = (env.body as { id: string }).id;
    const s = await createSession({ environmentId: envId, spec: { cmd: ["/bin/busybox", "sh", "-c", PROBE] } });
    expect(s.requirements?.capabilities).toContain("image:oci");
    const out = await outputOf(s.id, (t) => t.includes("DONE."));
    expect(out).toContain("marker=from the image.");
    expect(out).toContain("NODE:absent");
    expect(out).toContain("cwd=/home/workspace.");
    expect(out).toContain("read=in-workspace.");
    expect(blobGets()).toBeGreaterThan(0);
  });

  it("a second session starts from the cached image (no blob fetched), on the bwrap runner though a roomier process runner is there", async () => {
    await stack.addRunner({ runnerId: "runner-process", capacity: 64, env: { PADDOCK_SANDBOX: "process" } });
    const before = [...proxy.forwarded];
    const s = await createSession({ environmentId: envId, spec: { cmd: ["/bin/busybox", "sh", "-c", PROBE] } });
    const out = await outputOf(s.id, (t) => t.includes("DONE."));
    expect(out).toContain("marker=from the image.");
    expect((await untilSession(nc, s.id, (x) => x.state === "running")).runnerId).toBe("runner-1");
    expect(proxy.forwarded.slice(before.length).filter((r) => r.includes("/blobs/"))).toEqual([]);
    // Unconstrained sessions still go to the roomier process runner: the requirement is what kept the image session off it.
    const free = await createSession({ spec: { cmd: ["sleep", "600"] } });
    expect((await untilSession(nc, free.id, (x) => x.state === "running")).runnerId).toBe("runner-process");
  });

  it("fails a session whose image the registry does not have, with a clear reason", async () => {
    const s = await createSession({ spec: { image: `${proxy.host}/paddock/missing:1`, cmd: ["/bin/busybox", "sh"] } });
    const failed = await untilSession(nc, s.id, (x) => x.state === "failed");
    expect(failed.runnerId).toBe("runner-1");
    expect(failed.error).toMatch(/^image 127\.0\.0\.1:\d+\/paddock\/missing:1: .*not found/);
  });
});

describe("an image's config", () => {
  const expectConfigHonoured = (out: string) => {
    // The image's Env under Paddock's own variables: its PATH and LANG and its own names; HOME, TERM, PADDOCK_URL Paddock's.
    expect(out).toContain("from-image=yes. path=/opt/tools/bin:/bin. home=/home/workspace. lang=en_US.UTF-8. term=xterm-256color.");
    expect(out).toContain("forged-url=no.");
    // WorkingDir and User are not honoured: the workspace is the cwd, the session's own uid (from its range) the user.
    const uid = Number(/uid=(\d+)\./.exec(out)?.[1]);
    expect(out).toContain("cwd=/home/workspace.");
    expect(uid).toBeGreaterThanOrEqual(UID_FIRST);
    expect(uid).toBeLessThan(UID_FIRST + 32);
    expect(out).toContain("tool-ran=/opt/tools/bin/probe-tool.");
  };

  it("a session naming no cmd runs the image's Entrypoint and Cmd, with the image's Env", async () => {
    const s = await createSession({ spec: { image: configured } });
    expectConfigHonoured(await outputOf(s.id, (t) => t.includes("DONE.")));
  });

  it("a cmd found only through the image's PATH starts (the runner looks it up with the session's effective PATH)", async () => {
    const s = await createSession({ spec: { image: configured, cmd: ["probe-tool"] } });
    expect(await outputOf(s.id, (t) => t.includes("tool-ran="))).toContain("tool-ran=/opt/tools/bin/probe-tool.");
  });

  it("an environment's image with a cmd of the session's own: the Env still reaches it, the image's Cmd does not run", async () => {
    const env = await post("/v1/environments", { name: "configured", image: configured });
    expect(env.status).toBe(201);
    const s = await createSession({ environmentId: (env.body as { id: string }).id, spec: { cmd: ["/bin/busybox", "sh", "-c", `echo "own=$FROM_IMAGE."; exec /bin/busybox sleep 600`] } });
    const out = await outputOf(s.id, (t) => t.includes("own="));
    expect(out).toContain("own=yes.");
    expect(out).not.toContain("DONE.");
  });
});

describe("malformed image references", () => {
  it.each([
    ["an upper-case repository", `${"127.0.0.1:5000"}/Paddock/BusyBox:1`],
    ["a bad digest", "127.0.0.1:5000/paddock/busybox@sha256:abc"],
    ["a bad tag", "paddock/busybox:-1"],
    ["an over-long name", `${"a/".repeat(200)}b`],
  ])("are refused at the API (400 invalid) for %s, on environments and sessions, creating nothing", async (_what, bad) => {
    const before = ((await api(stack.url, stack.token, "GET", "/v1/sessions?limit=500&includeTerminal=true")).body as { sessions: unknown[] }).sessions.length;
    const env = await post("/v1/environments", { name: "bad-image", image: bad });
    expect([env.status, (env.body as { error: { code: string } }).error.code]).toEqual([400, "invalid"]);
    const session = await post("/v1/sessions", { spec: { image: bad, cmd: ["/bin/busybox", "true"] } });
    expect([session.status, (session.body as { error: { code: string } }).error.code]).toEqual([400, "invalid"]);
    expect((session.body as { error: { message: string } }).error.message).toContain("image");
    const after = ((await api(stack.url, stack.token, "GET", "/v1/sessions?limit=500&includeTerminal=true")).body as { sessions: unknown[] }).sessions.length;
    expect(after).toBe(before);
  });
});
