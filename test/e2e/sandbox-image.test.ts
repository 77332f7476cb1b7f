/**
 * OCI images as a session's root through the real stack (issue 23 item 6): a
 * registry on loopback (docker-registry, behind a proxy that records what
 * reaches it) serves a busybox image; a bwrap runner pulls it, unpacks it and
 * roots a session in it (the image's files, none of the host's), with the
 * workspace writable inside. A second session starts from the cache (no blob
 * fetched again), and is placed on the bwrap runner although a roomier
 * process runner is there (image sessions require `image:oci`). A missing
 * image fails the session with a clear reason.
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

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startRegistryProxy(registry.url);
  const built = buildImage({ layers: [busyboxLayer(), [{ path: "etc", type: "dir" }, { path: "etc/only-in-image", type: "file", content: "from the image\n" }]], gzip: true });
  await pushImage({ baseUrl: registry.url, name: "paddock/busybox" }, "1", built);
  image = `${proxy.host}/paddock/busybox:1`;
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
