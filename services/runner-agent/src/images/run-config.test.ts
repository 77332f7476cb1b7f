import { describe, expect, it } from "vitest";
import { ImageConfig } from "@paddock/oci";
import { ImageError } from "./errors.ts";
import { runConfigOf } from "./run-config.ts";

const config = (c: Record<string, unknown>) => ImageConfig.parse({ architecture: "amd64", os: "linux", config: c, rootfs: { type: "layers", diff_ids: [] } });

describe("runConfigOf", () => {
  it("reads Env (later entries win, entries without = skipped, PADDOCK_ dropped) and Entrypoint then Cmd", () => {
    const r = runConfigOf(
      config({ Env: ["PATH=/opt/bin:/bin", "A=1", "A=2", "EMPTY=", "NOVALUE", "PADDOCK_TOKEN=forged", "EQ=a=b"], Entrypoint: ["/bin/tini", "--"], Cmd: ["python3"], WorkingDir: "/app", User: "nobody" }),
    );
    expect(r).toEqual({ env: { PATH: "/opt/bin:/bin", A: "2", EMPTY: "", EQ: "a=b" }, command: ["/bin/tini", "--", "python3"] });
  });

  it("has no command when both are empty or absent, and no env for a config without one", () => {
    expect(runConfigOf(config({ Entrypoint: null, Cmd: [] }))).toEqual({ env: {} });
    expect(runConfigOf(ImageConfig.parse({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }))).toEqual({ env: {} });
  });

  it("refuses NUL in Env or the command, and a command past an app's bounds: image_unsupported", () => {
    for (const c of [{ Env: ["A=x\0y"] }, { Cmd: ["a\0b"] }, { Cmd: Array.from({ length: 300 }, () => "x") }, { Entrypoint: ["x".repeat(5000)] }]) {
      let caught: unknown;
      try {
        runConfigOf(config(c));
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(ImageError);
      expect((caught as ImageError).code).toBe("image_unsupported");
    }
  });
});
