import { describe, expect, it } from "vitest";
import { ImageError } from "./errors.ts";
import { parseReference } from "./reference.ts";

const DIGEST = `sha256:${"a".repeat(64)}`;

describe("parseReference", () => {
  it("reads host:port/name:tag, a digest, and docker's defaults", () => {
    expect(parseReference("127.0.0.1:5000/paddock/busybox:1.36")).toMatchObject({
      registry: "127.0.0.1:5000",
      apiHost: "127.0.0.1:5000",
      repository: "paddock/busybox",
      tag: "1.36",
      canonical: "127.0.0.1:5000/paddock/busybox:1.36",
    });
    expect(parseReference(`localhost/app@${DIGEST}`)).toMatchObject({ registry: "localhost", repository: "app", digest: DIGEST });
    expect(parseReference("debian")).toMatchObject({ registry: "docker.io", apiHost: "registry-1.docker.io", repository: "library/debian", tag: "latest" });
    expect(parseReference(`reg.example.com/a/b:v1@${DIGEST}`)).toMatchObject({ tag: "v1", digest: DIGEST });
  });

  it.each([
    ["", "empty"],
    ["UPPER/case", "upper-case repository"],
    ["reg:5000/", "no repository"],
    ["host:5000/name:bad tag", "whitespace"],
    ["host:5000/name:-tag", "tag starting with -"],
    ["host:5000/name@sha256:abc", "short digest"],
    ["host:5000/name@md5:" + "a".repeat(32), "other algorithm"],
    ["host:99999/name", "port out of range"],
    ["host:5000/../etc", "path traversal"],
    ["name\0x", "NUL"],
    ["a/".repeat(200) + "b", "too long"],
  ])("refuses %j (%s) with invalid_reference", (ref) => {
    let caught: unknown;
    try {
      parseReference(ref);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ImageError);
    expect((caught as ImageError).code).toBe("invalid_reference");
    expect((caught as ImageError).status).toBe("invalid");
  });
});
