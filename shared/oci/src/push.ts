// Pushes built images to a registry over the OCI distribution API (monolithic
// uploads): what tests and benchmarks use to fill a loopback registry.
import type { Blob, BuiltImage } from "./image.ts";

export interface PushTarget {
  /** e.g. http://127.0.0.1:5000 */
  baseUrl: string;
  /** Repository name, e.g. paddock/busybox */
  name: string;
}

async function expectStatus(res: Response, status: number, what: string): Promise<void> {
  if (res.status !== status) throw new Error(`push ${what}: HTTP ${res.status} ${await res.text()}`);
}

export async function pushBlob(target: PushTarget, b: Blob): Promise<void> {
  const head = await fetch(`${target.baseUrl}/v2/${target.name}/blobs/${b.descriptor.digest}`, { method: "HEAD" });
  if (head.status === 200) return;
  const start = await fetch(`${target.baseUrl}/v2/${target.name}/blobs/uploads/`, { method: "POST" });
  await expectStatus(start, 202, "upload start");
  const location = new URL(start.headers.get("location") ?? "", target.baseUrl);
  location.searchParams.set("digest", b.descriptor.digest);
  const put = await fetch(location, { method: "PUT", headers: { "content-type": "application/octet-stream" }, body: b.data });
  await expectStatus(put, 201, `blob ${b.descriptor.digest}`);
}

export async function pushManifest(target: PushTarget, reference: string, manifest: Blob): Promise<void> {
  const res = await fetch(`${target.baseUrl}/v2/${target.name}/manifests/${reference}`, {
    method: "PUT",
    headers: { "content-type": manifest.descriptor.mediaType },
    body: manifest.data,
  });
  await expectStatus(res, 201, `manifest ${reference}`);
}

/** Pushes an image's blobs and its manifest under tag. */
export async function pushImage(target: PushTarget, tag: string, image: BuiltImage): Promise<void> {
  for (const b of [image.config, ...image.layers]) await pushBlob(target, b);
  await pushManifest(target, tag, image.manifest);
}

/** Pushes each platform image by digest, then the index under tag. */
export async function pushIndex(target: PushTarget, tag: string, images: readonly BuiltImage[], index: Blob): Promise<void> {
  for (const image of images) {
    for (const b of [image.config, ...image.layers]) await pushBlob(target, b);
    await pushManifest(target, image.manifest.descriptor.digest, image.manifest);
  }
  await pushManifest(target, tag, index);
}
