// Pulls from a real registry (Debian's docker-registry) on loopback.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createServer as createHttpServer } from "node:http";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { buildIndex, pushImage, pushIndex } from "@paddock/oci";
import { scratchDirs, startRegistry, startRegistryProxy, type RegistryHandle } from "@paddock/testing";
import { ImageError } from "./errors.ts";
import { busyboxImage, count, leftovers, runInRootfs, startStore } from "./test-support.ts";

const scratch = scratchDirs("paddock-images-");
let registry: RegistryHandle;
const image = busyboxImage();

beforeAll(async () => {
  registry = await startRegistry();
  await pushImage({ baseUrl: registry.url, name: "paddock/busybox" }, "1", image);
});
afterAll(async () => {
  await registry.stop();
});
afterEach(() => scratch.removeAll());

async function caught(p: Promise<unknown>): Promise<ImageError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ImageError);
  return err as ImageError;
}

describe("pull from a registry", () => {
  it("pulls a tagged image, unpacks it by manifest digest, and busybox runs in it", async () => {
    const { store, events } = await startStore(scratch.make(), { insecureRegistries: [registry.host] });
    const lease = await store.pull(`${registry.host}/paddock/busybox:1`);
    expect(lease.image.digest).toBe(image.manifest.descriptor.digest);
    expect(lease.image.config.config?.Cmd).toEqual(["/bin/sh"]);
    const run = runInRootfs(lease.image.rootfs, ["/bin/busybox", "sh", "-c", "echo hi; /bin/busybox cat /etc/motd"]);
    expect(run.stderr).toBe("");
    expect(run.stdout).toBe("hi\nhello from the image\n");
    expect(count(events, "unpack_start")).toBe(1);
    lease.release();
  });

  it("a second pull of the same reference does no network and no unpack", async () => {
    const proxy = await startRegistryProxy(registry.url);
    const root = scratch.make();
    const first = await startStore(root, { insecureRegistries: [proxy.host] });
    const ref = `${proxy.host}/paddock/busybox:1`;
    (await first.store.pull(ref)).release();
    expect(proxy.forwarded.length).toBeGreaterThan(0);
    await proxy.stop();
    // A new store over the same dir, as after a runner restart; the registry is gone.
    const second = await startStore(root, { insecureRegistries: [proxy.host] });
    const lease = await second.store.pull(ref);
    expect(lease.image.digest).toBe(image.manifest.descriptor.digest);
    expect(count(second.events, "blob")).toBe(0);
    expect(count(second.events, "unpack_start")).toBe(0);
    expect(count(second.events, "hit")).toBe(1);
    expect(runInRootfs(lease.image.rootfs, ["/bin/sh", "-c", "echo hi"]).stdout).toBe("hi\n");
    // The same image by its manifest digest, never pulled under that name: no network either.
    const byDigest = await second.store.pull(`${proxy.host}/paddock/busybox@${image.manifest.descriptor.digest}`);
    expect(byDigest.image.rootfs).toBe(lease.image.rootfs);
  });

  it("concurrent pulls of one image download each blob once and unpack once", async () => {
    const proxy = await startRegistryProxy(registry.url);
    try {
      const { store, events } = await startStore(scratch.make(), { insecureRegistries: [proxy.host] });
      const leases = await Promise.all([1, 2, 3].map(() => store.pull(`${proxy.host}/paddock/busybox:1`)));
      expect(new Set(leases.map((l) => l.image.rootfs)).size).toBe(1);
      const blobGets = proxy.forwarded.filter((r) => r.startsWith("GET ") && r.includes("/blobs/"));
      expect(blobGets.sort()).toEqual([image.config, ...image.layers].map((b) => `GET /v2/paddock/busybox/blobs/${b.descriptor.digest}`).sort());
      expect(count(events, "unpack_start")).toBe(1);
    } finally {
      await proxy.stop();
    }
  });

  it("picks linux/amd64 from an OCI index and a Docker manifest list, and pulls by digest", async () => {
    const arm = busyboxImage({ architecture: "arm64", extra: [{ path: "arch", type: "file", content: "arm64\n" }] });
    const amd = busyboxImage({ docker: true, extra: [{ path: "arch", type: "file", content: "amd64\n" }] });
    const target = { baseUrl: registry.url, name: "paddock/multi" };
    const ociIndex = buildIndex([{ image: arm, architecture: "arm64" }, { image: amd, architecture: "amd64" }]);
    await pushIndex(target, "oci", [arm, amd], ociIndex);
    await pushIndex(target, "docker", [arm, amd], buildIndex([{ image: arm, architecture: "arm64" }, { image: amd, architecture: "amd64" }], true));
    const { store, events } = await startStore(scratch.make(), { insecureRegistries: [registry.host] });
    for (const ref of ["paddock/multi:oci", "paddock/multi:docker", `paddock/multi@${ociIndex.descriptor.digest}`]) {
      const lease = await store.pull(`${registry.host}/${ref}`);
      expect(lease.image.digest).toBe(amd.manifest.descriptor.digest);
      expect(runInRootfs(lease.image.rootfs, ["/bin/sh", "-c", "/bin/busybox cat /arch"]).stdout).toBe("amd64\n");
    }
    // Three references, one image: one unpack.
    expect(count(events, "unpack_start")).toBe(1);
  });

  it("answers a bearer challenge with a token from the realm, sending the configured credentials there only", async () => {
    const bearer = { token: "t0ken-abc", user: "puller", password: "s3cret" };
    const proxy = await startRegistryProxy(registry.url, { bearer });
    try {
      const denied = await startStore(scratch.make(), { insecureRegistries: [proxy.host] });
      const refused = await caught(denied.store.pull(`${proxy.host}/paddock/busybox:1`));
      expect([refused.code, refused.status]).toEqual(["registry_unauthenticated", "unauthenticated"]);
      const { store } = await startStore(scratch.make(), { insecureRegistries: [proxy.host] }, (host) =>
        host === proxy.host ? { username: bearer.user, password: bearer.password } : undefined,
      );
      const lease = await store.pull(`${proxy.host}/paddock/busybox:1`);
      expect(lease.image.digest).toBe(image.manifest.descriptor.digest);
      expect(proxy.tokenRequests.at(-1)).toContain("scope=repository%3Apaddock%3Apull");
      expect(proxy.forwarded.some((r) => r.includes("/blobs/"))).toBe(true);
      // Credentials and the token travel in headers only: never in a URL the proxy saw.
      expect(proxy.tokenRequests.join(" ")).not.toMatch(/s3cret|t0ken|puller/);
    } finally {
      await proxy.stop();
    }
  });

  it("follows a blob redirect to storage on another origin without taking the token there", async () => {
    const seen: Array<string | null> = [];
    const blobs = new Map([image.config, ...image.layers].map((b) => [`/${b.descriptor.digest}`, b.data]));
    const storage = createHttpServer((req, res) => {
      seen.push(req.headers.authorization ?? null);
      const data = blobs.get(req.url ?? "");
      if (!data) return void res.writeHead(404).end();
      res.writeHead(200, { "content-length": data.length }).end(data);
    });
    await new Promise<void>((r) => storage.listen(0, "127.0.0.1", r));
    // "localhost" is another origin than the registry's 127.0.0.1.
    const storageUrl = `http://localhost:${(storage.address() as AddressInfo).port}`;
    const bearer = { token: "t0ken-abc", user: "puller", password: "s3cret" };
    const proxy = await startRegistryProxy(registry.url, { bearer, redirectBlobsTo: storageUrl });
    try {
      const { store } = await startStore(scratch.make(), { insecureRegistries: [proxy.host] }, () => ({ username: bearer.user, password: bearer.password }));
      const lease = await store.pull(`${proxy.host}/paddock/busybox:1`);
      expect(runInRootfs(lease.image.rootfs, ["/bin/sh", "-c", "echo hi"]).stdout).toBe("hi\n");
      expect(seen).toEqual([null, null, null]);
    } finally {
      await proxy.stop();
      storage.closeAllConnections();
      await new Promise<void>((r) => storage.close(() => r()));
    }
  });

  it("reaches a registry not listed as insecure only over TLS (so this plain-HTTP one fails)", async () => {
    const root = scratch.make();
    const { store } = await startStore(root);
    expect((await caught(store.pull(`${registry.host}/paddock/busybox:1`))).code).toBe("registry_unavailable");
    expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
  });

  it("a missing repository or tag is image_not_found; a bad reference is invalid_reference", async () => {
    const { store } = await startStore(scratch.make(), { insecureRegistries: [registry.host] });
    const missing = await caught(store.pull(`${registry.host}/paddock/nope:1`));
    expect([missing.code, missing.status]).toEqual(["image_not_found", "not_found"]);
    expect((await caught(store.pull(`${registry.host}/paddock/busybox:nope`))).code).toBe("image_not_found");
    expect((await caught(store.pull(`${registry.host}/Paddock/BusyBox`))).code).toBe("invalid_reference");
  });

  it("a registry that accepts but never answers times out with registry_timeout", async () => {
    const held: Socket[] = [];
    const silent: Server = createServer((socket) => held.push(socket));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const host = `127.0.0.1:${(silent.address() as AddressInfo).port}`;
    try {
      const root = scratch.make();
      const { store } = await startStore(root, { insecureRegistries: [host], requestTimeoutMs: 200 });
      const err = await caught(store.pull(`${host}/paddock/busybox:1`));
      expect([err.code, err.status]).toEqual(["registry_timeout", "unavailable"]);
      expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
    } finally {
      for (const s of held) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });
});
