// A registry that serves bytes other than the ones its manifest names: every
// lie is a typed digest_mismatch and leaves nothing in the cache.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { buildIndex, MediaType, type Blob } from "@paddock/oci";
import { scratchDirs } from "@paddock/testing";
import { ImageError } from "./errors.ts";
import { busyboxImage, leftovers, startStore } from "./test-support.ts";

const scratch = scratchDirs("paddock-images-lie-");
/** `stall`: send the headers and half the body, then nothing (the connection stays open). */
const routes = new Map<string, { body: Buffer; type?: string; stall?: boolean }>();
let server: Server;
let host = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    const route = routes.get(req.url ?? "");
    if (!route) return void res.writeHead(404).end();
    if (route.stall) {
      res.writeHead(200, { "content-length": route.body.length });
      return void res.write(route.body.subarray(0, route.body.length >> 1));
    }
    res.writeHead(200, { "content-type": route.type ?? "application/octet-stream", "content-length": route.body.length }).end(route.body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(
  () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
);
afterEach(() => {
  routes.clear();
  scratch.removeAll();
});

function serve(name: string, ref: string, manifest: Blob, blobs: readonly Blob[], override: Map<string, Buffer> = new Map()): void {
  routes.set(`/v2/${name}/manifests/${ref}`, { body: manifest.data, type: manifest.descriptor.mediaType });
  for (const b of blobs) routes.set(`/v2/${name}/blobs/${b.descriptor.digest}`, { body: override.get(b.descriptor.digest) ?? b.data });
}

async function pullFails(ref: string, config: { idleTimeoutMs?: number } = {}): Promise<ImageError> {
  const root = scratch.make();
  const { store } = await startStore(root, { insecureRegistries: [host], ...config });
  const err = await store.pull(`${host}/${ref}`).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ImageError);
  expect(leftovers(root)).toEqual({ entries: [], tmp: [] });
  return err as ImageError;
}

describe("a registry that lies", () => {
  const image = busyboxImage();
  const layer = image.layers[1] as Blob;

  it("serves a layer with other bytes of the same size: digest_mismatch, nothing cached", async () => {
    const altered = Buffer.from(layer.data);
    altered.writeUInt8(altered.readUInt8(altered.length - 1) ^ 0xff, altered.length - 1);
    serve("lie/altered", "1", image.manifest, [image.config, ...image.layers], new Map([[layer.descriptor.digest, altered]]));
    const err = await pullFails("lie/altered:1");
    expect(err.code).toBe("digest_mismatch");
    expect(err.message).toContain("content hashes to");
  });

  it("serves more bytes than the descriptor's size: refused as soon as they pass it", async () => {
    serve("lie/long", "1", image.manifest, [image.config, ...image.layers], new Map([[layer.descriptor.digest, Buffer.concat([layer.data, Buffer.alloc(1 << 20)])]]));
    const err = await pullFails("lie/long:1");
    expect(err.code).toBe("digest_mismatch");
    expect(err.message).toContain(`more than its ${layer.descriptor.size} bytes`);
  });

  it("serves a short config", async () => {
    serve("lie/short", "1", image.manifest, [image.config, ...image.layers], new Map([[image.config.descriptor.digest, image.config.data.subarray(1)]]));
    expect((await pullFails("lie/short:1")).code).toBe("digest_mismatch");
  });

  it("answers a pull by digest with another manifest", async () => {
    const other = busyboxImage({ extra: [{ path: "other", type: "file", content: "x" }] });
    routes.set(`/v2/lie/bydigest/manifests/${image.manifest.descriptor.digest}`, { body: other.manifest.data, type: MediaType.ociManifest });
    expect((await pullFails(`lie/bydigest@${image.manifest.descriptor.digest}`)).code).toBe("digest_mismatch");
  });

  it("serves an index whose platform manifest is not the one it names", async () => {
    const other = busyboxImage({ extra: [{ path: "other", type: "file", content: "x" }] });
    const index = buildIndex([{ image, architecture: "amd64" }]);
    routes.set(`/v2/lie/index/manifests/1`, { body: index.data, type: index.descriptor.mediaType });
    routes.set(`/v2/lie/index/manifests/${image.manifest.descriptor.digest}`, { body: other.manifest.data, type: MediaType.ociManifest });
    expect((await pullFails("lie/index:1")).code).toBe("digest_mismatch");
  });

  it("serves a manifest that is not JSON, or an unsupported layer type: image_unsupported", async () => {
    routes.set(`/v2/lie/junk/manifests/1`, { body: Buffer.from("<html>"), type: MediaType.ociManifest });
    expect((await pullFails("lie/junk:1")).code).toBe("image_unsupported");
    const zstd = JSON.parse(image.manifest.data.toString()) as { layers: Array<{ mediaType: string }> };
    for (const l of zstd.layers) l.mediaType = MediaType.ociLayerZstd;
    routes.set(`/v2/lie/zstd/manifests/1`, { body: Buffer.from(JSON.stringify(zstd)), type: MediaType.ociManifest });
    expect((await pullFails("lie/zstd:1")).code).toBe("image_unsupported");
  });

  it("stops sending a layer half-way: registry_timeout after the idle deadline, nothing cached", async () => {
    serve("lie/stall", "1", image.manifest, [image.config, ...image.layers]);
    routes.set(`/v2/lie/stall/blobs/${layer.descriptor.digest}`, { body: layer.data, stall: true });
    const err = await pullFails("lie/stall:1", { idleTimeoutMs: 200 });
    expect([err.code, err.status]).toEqual(["registry_timeout", "unavailable"]);
  });

  it("serves only an arm64 image: no_matching_platform", async () => {
    const arm = busyboxImage({ architecture: "arm64" });
    serve("lie/arm", "1", arm.manifest, [arm.config, ...arm.layers]);
    expect((await pullFails("lie/arm:1")).code).toBe("no_matching_platform");
  });
});
