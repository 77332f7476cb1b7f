import { describe, expect, it } from "vitest";
import { CreateEnvironmentBody, UpdateEnvironmentBody } from "./environment.ts";
import { ImageRef, parseImageRef } from "./image-ref.ts";
import { CreateSessionBody, PortableSpec } from "./session.ts";

const DIGEST = `sha256:${"a".repeat(64)}`;

/** References the API must refuse, and why a user would write them. */
const BAD_IMAGE_REFS: ReadonlyArray<[string, string]> = [
  ["", "empty"],
  ["UPPER/case", "upper-case repository"],
  ["Debian", "upper-case single name"],
  ["reg:5000/", "no repository"],
  ["host:5000/name:bad tag", "whitespace"],
  ["host:5000/name:-tag", "tag starting with -"],
  ["name:" + "t".repeat(129), "tag over 128"],
  ["host:5000/name@sha256:abc", "short digest"],
  [`name@sha256:${"A".repeat(64)}`, "upper-case digest"],
  ["host:5000/name@md5:" + "a".repeat(32), "other algorithm"],
  ["host:99999/name", "port out of range"],
  ["host:5000/../etc", "path traversal"],
  ["name\0x", "NUL"],
  ["a/".repeat(200) + "b", "name over 255"],
  ["x".repeat(513), "over 512"],
  ["-bad.host:5000/name", "bad host"],
];

describe("ImageRef", () => {
  it("takes what registries take: host:port, nested paths, tags, digests, docker's short names", () => {
    for (const ref of ["debian", "python:3.12-slim", "127.0.0.1:5000/paddock/busybox:1", `localhost/app@${DIGEST}`, `reg.example.com/a/b:v1@${DIGEST}`, "ghcr.io/o/r__x.y-z:1.0"]) {
      expect(ImageRef.safeParse(ref).success, ref).toBe(true);
    }
    expect(parseImageRef("debian")).toEqual({ ok: true, parts: { registry: "docker.io", repository: "library/debian", tag: "latest" } });
  });

  it.each(BAD_IMAGE_REFS)("refuses %j (%s) with a reason", (ref) => {
    const r = ImageRef.safeParse(ref);
    expect(r.success).toBe(false);
    expect(r.error?.issues.length).toBeGreaterThan(0);
  });

  it("is what the bodies that take an image check; records keep what they hold", () => {
    expect(CreateEnvironmentBody.safeParse({ name: "e", image: "UPPER/case" }).success).toBe(false);
    expect(UpdateEnvironmentBody.safeParse({ image: "UPPER/case" }).success).toBe(false);
    // "" clears an environment's image on PATCH.
    expect(UpdateEnvironmentBody.safeParse({ image: "" }).success).toBe(true);
    expect(CreateSessionBody.safeParse({ spec: { image: `n@sha256:abc` } }).success).toBe(false);
    expect(CreateSessionBody.safeParse({ spec: { image: "n:1", cmd: ["x"] } }).success).toBe(true);
    expect(CreateSessionBody.safeParse({ spec: { image: "n:1", extra: 1 } }).success).toBe(false);
    expect(PortableSpec.safeParse({ image: "UPPER/case" }).success).toBe(true);
  });
});
