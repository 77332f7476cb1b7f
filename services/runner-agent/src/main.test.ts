import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError } from "@paddock/config";
import { startService } from "@paddock/testing";
import { useNatsServer } from "@paddock/testing/vitest";
import { DEFAULT_INIT_PATH, loadConfig } from "./config.ts";
import { fakeScheduler } from "./testing/test-support.ts";
import { DEFAULT_SANDBOX_LIMITS } from "./sandbox/bwrap/limits.ts";
import { RESTORE_WORKERS_MIN_CHUNKS } from "./workspace/checkpoint.ts";

describe("config", () => {
  it("parses the runner settings with defaults", () => {
    const c = loadConfig({ PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x", PADDOCK_RUNNER_CAPABILITIES: "gpu, process,," });
    expect(c).toMatchObject({ runnerId: "r1", poolId: "default", capacityTotal: 8, capabilities: ["gpu", "process"], leaseRenewMs: 2_000 });
  });

  it("reads the terminal log window and screen checkpoint timing; 0 turns either off; refuses anything else", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    expect(loadConfig(base).terminal).toEqual({ coalesceMs: 4, screen: { quietMs: 200, intervalMs: 5_000 } });
    expect(loadConfig({ ...base, PADDOCK_RUNNER_TERM_COALESCE_MS: "0", PADDOCK_RUNNER_SCREEN_INTERVAL_MS: "0" }).terminal).toEqual({ coalesceMs: 0, screen: undefined });
    expect(loadConfig({ ...base, PADDOCK_RUNNER_SCREEN_QUIET_MS: "50", PADDOCK_RUNNER_SCREEN_INTERVAL_MS: "5000" }).terminal.screen).toEqual({ quietMs: 50, intervalMs: 5_000 });
    expect(loadConfig(base).restoreWorkersMinChunks).toBe(RESTORE_WORKERS_MIN_CHUNKS);
    expect(loadConfig({ ...base, PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS: "0" }).restoreWorkersMinChunks).toBe(0);
    for (const [key, bad] of [
      ["PADDOCK_RUNNER_TERM_COALESCE_MS", "-1"],
      ["PADDOCK_RUNNER_TERM_COALESCE_MS", "2.5"],
      ["PADDOCK_RUNNER_TERM_COALESCE_MS", "60000"],
      ["PADDOCK_RUNNER_TERM_COALESCE_MS", "soon"],
      ["PADDOCK_RUNNER_SCREEN_QUIET_MS", "0"],
      ["PADDOCK_RUNNER_SCREEN_QUIET_MS", "3600001"],
      ["PADDOCK_RUNNER_SCREEN_INTERVAL_MS", "-5"],
      ["PADDOCK_RUNNER_SCREEN_INTERVAL_MS", "1e12"],
      ["PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS", "-1"],
      ["PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS", "1.5"],
      ["PADDOCK_RUNNER_RESTORE_WORKERS_MIN_CHUNKS", "lots"],
    ] as const) {
      expect(() => loadConfig({ ...base, [key]: bad }), `${key}=${bad}`).toThrow(ConfigError);
    }
  });

  it("listens for the data plane on loopback by default, where told, or not at all; a wildcard needs an advertised host; refuses anything else", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    expect(loadConfig(base).dataPlane).toEqual({ host: "127.0.0.1", port: 0, advertiseHost: "127.0.0.1" });
    expect(loadConfig({ ...base, PADDOCK_RUNNER_DATA_LISTEN: "off" }).dataPlane).toBeUndefined();
    expect(loadConfig({ ...base, PADDOCK_RUNNER_DATA_LISTEN: "10.0.0.5:7443" }).dataPlane).toEqual({ host: "10.0.0.5", port: 7443, advertiseHost: "10.0.0.5" });
    expect(loadConfig({ ...base, PADDOCK_RUNNER_DATA_LISTEN: "[::1]:7443" }).dataPlane).toEqual({ host: "::1", port: 7443, advertiseHost: "::1" });
    expect(loadConfig({ ...base, PADDOCK_RUNNER_DATA_LISTEN: "0.0.0.0:7443", PADDOCK_RUNNER_DATA_ADVERTISE: "runner-7.internal" }).dataPlane).toEqual({ host: "0.0.0.0", port: 7443, advertiseHost: "runner-7.internal" });
    for (const env of [
      { PADDOCK_RUNNER_DATA_LISTEN: "0.0.0.0:7443" },
      { PADDOCK_RUNNER_DATA_LISTEN: "[::]:7443" },
      { PADDOCK_RUNNER_DATA_LISTEN: "7443" },
      { PADDOCK_RUNNER_DATA_LISTEN: "host:70000" },
      { PADDOCK_RUNNER_DATA_LISTEN: "http://host:1" },
      { PADDOCK_RUNNER_DATA_LISTEN: "" },
      { PADDOCK_RUNNER_DATA_LISTEN: "OFF" },
      { PADDOCK_RUNNER_DATA_ADVERTISE: "a host" },
      { PADDOCK_RUNNER_DATA_ADVERTISE: "" },
    ]) {
      expect(() => loadConfig({ ...base, ...env }), JSON.stringify(env)).toThrow(ConfigError);
    }
  });

  it("packs checkpoints with gzip unless told none; refuses any other compression", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    expect(loadConfig(base).checkpointCompression).toBe("gzip");
    expect(loadConfig({ ...base, PADDOCK_RUNNER_CHECKPOINT_COMPRESSION: "none" }).checkpointCompression).toBe("none");
    for (const bad of ["", "zstd", "GZIP", "none "]) {
      expect(() => loadConfig({ ...base, PADDOCK_RUNNER_CHECKPOINT_COMPRESSION: bad }), bad).toThrow(ConfigError);
    }
  });

  it("runs sessions in bwrap where it works (auto) unless PADDOCK_SANDBOX says bwrap or process; refuses anything else", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    expect(loadConfig(base).sandbox).toEqual({ backend: "auto", hide: [], shared: [], uidFirst: 200_000, uidCount: 1_024, netInstance: undefined, netPrefix: undefined, limits: DEFAULT_SANDBOX_LIMITS, init: DEFAULT_INIT_PATH });
    expect(DEFAULT_INIT_PATH).toMatch(/\/services\/runner-agent\/native\/paddock-init$/);
    expect(loadConfig({ ...base, PADDOCK_SANDBOX_INIT: "/opt/paddock/paddock-init" }).sandbox.init).toBe("/opt/paddock/paddock-init");
    const set = { PADDOCK_SANDBOX: "bwrap", PADDOCK_SANDBOX_UID_FIRST: "300000", PADDOCK_SANDBOX_UID_COUNT: "64", PADDOCK_SANDBOX_PROCESSES: "256", PADDOCK_SANDBOX_NET_INSTANCE: "ab1", PADDOCK_SANDBOX_NET_PREFIX: "10.50" };
    expect(loadConfig({ ...base, ...set }).sandbox).toEqual({ backend: "bwrap", hide: [], shared: [], uidFirst: 300_000, uidCount: 64, netInstance: "ab1", netPrefix: [10, 50], limits: { ...DEFAULT_SANDBOX_LIMITS, rlimits: { ...DEFAULT_SANDBOX_LIMITS.rlimits, processes: 256 } }, init: DEFAULT_INIT_PATH });
    expect(loadConfig({ ...base, PADDOCK_SANDBOX: "process" }).sandbox.backend).toBe("process");
    // The dirs of the credential files it is given by path are what its sessions never see (besides its data dir).
    const credsDir = mkdtempSync(join(tmpdir(), "paddock-creds-"));
    const keyDir = mkdtempSync(join(tmpdir(), "paddock-key-"));
    writeFileSync(join(credsDir, "runner.json"), JSON.stringify({ user: "runner", password: "pw" }), { mode: 0o600 });
    writeFileSync(join(keyDir, "secrets-key"), "ab".repeat(32), { mode: 0o600 });
    const files = { PADDOCK_NATS_CREDS_FILE: join(credsDir, "runner.json"), PADDOCK_SECRETS_KEY_FILE: join(keyDir, "secrets-key") };
    expect(loadConfig({ ...base, ...files }).sandbox.hide).toEqual([credsDir, keyDir]);
    // Shared dirs: absolute, never the data dir or a credential file's dir, nor holding one.
    expect(loadConfig({ ...base, PADDOCK_SANDBOX_SHARED_DIRS: "/srv/cache, /var/obs" }).sandbox.shared).toEqual(["/srv/cache", "/var/obs"]);
    for (const bad of ["cache", "/", "/srv/../etc", "/tmp/x", "/tmp", "/tmp/x/sessions", credsDir, join(keyDir, "sub"), "/tmp/ok,/tmp"]) {
      expect(() => loadConfig({ ...base, ...files, PADDOCK_SANDBOX_SHARED_DIRS: bad }), bad).toThrow(ConfigError);
    }
    for (const [key, bad] of [
      ["PADDOCK_SANDBOX", "docker"],
      ["PADDOCK_SANDBOX", ""],
      ["PADDOCK_SANDBOX", "BWRAP"],
      ["PADDOCK_SANDBOX_UID_FIRST", "0"],
      ["PADDOCK_SANDBOX_UID_FIRST", "-1"],
      ["PADDOCK_SANDBOX_UID_COUNT", "0"],
      ["PADDOCK_SANDBOX_UID_COUNT", "16385"],
      ["PADDOCK_SANDBOX_PROCESSES", "15"],
      ["PADDOCK_SANDBOX_PROCESSES", "many"],
      ["PADDOCK_SANDBOX_NET_INSTANCE", "toolong"],
      ["PADDOCK_SANDBOX_NET_INSTANCE", "A-b"],
      ["PADDOCK_SANDBOX_NET_PREFIX", "10.300"],
      ["PADDOCK_SANDBOX_NET_PREFIX", "10.0.0"],
      ["PADDOCK_SANDBOX_NET_PREFIX", "ten.x"],
      ["PADDOCK_SANDBOX_INIT", "paddock-init"],
      ["PADDOCK_SANDBOX_INIT", ""],
    ] as const) {
      expect(() => loadConfig({ ...base, [key]: bad }), `${key}=${bad}`).toThrow(ConfigError);
    }
  });

  it("takes per-session limits (rlimits always, cgroup where delegated) from the config; refuses a non-positive or absurd one", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    const set = {
      PADDOCK_SANDBOX_PROCESSES: "256",
      PADDOCK_SANDBOX_MAX_OPEN_FILES: "512",
      PADDOCK_SANDBOX_MAX_FILE_SIZE_BYTES: "1048576",
      PADDOCK_SANDBOX_MEMORY_MAX_BYTES: "536870912",
      PADDOCK_SANDBOX_CPU_MILLIS: "1500",
      PADDOCK_SANDBOX_PIDS_MAX: "300",
    };
    expect(loadConfig({ ...base, ...set }).sandbox.limits).toEqual({
      rlimits: { processes: 256, openFiles: 512, fileSizeBytes: 1_048_576 },
      cgroup: { memoryMaxBytes: 536_870_912, cpuMaxMicros: 150_000, pidsMax: 300 },
    });
    for (const [key, bad] of [
      ["PADDOCK_SANDBOX_MAX_OPEN_FILES", "1.5"],
      ["PADDOCK_SANDBOX_MAX_OPEN_FILES", "99999999"],
      ["PADDOCK_SANDBOX_MAX_FILE_SIZE_BYTES", "0"],
      ["PADDOCK_SANDBOX_MEMORY_MAX_BYTES", "-1"],
      ["PADDOCK_SANDBOX_CPU_MILLIS", "5"],
      ["PADDOCK_SANDBOX_PIDS_MAX", "0"],
    ] as const) {
      expect(() => loadConfig({ ...base, [key]: bad }), `${key}=${bad}`).toThrow(ConfigError);
    }
  });

  it("reads the image store's insecure registries and cache bound; refuses anything else", () => {
    const base = { PADDOCK_RUNNER_ID: "r1", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" };
    expect(loadConfig(base).images).toMatchObject({ insecureRegistries: [], maxCacheBytes: 32 * 1024 ** 3 });
    const set = { PADDOCK_IMAGE_INSECURE_REGISTRIES: "127.0.0.1:5000, mirror.local", PADDOCK_IMAGE_CACHE_MAX_BYTES: "1000000" };
    expect(loadConfig({ ...base, ...set }).images).toMatchObject({ insecureRegistries: ["127.0.0.1:5000", "mirror.local"], maxCacheBytes: 1_000_000 });
    for (const [key, bad] of [
      ["PADDOCK_IMAGE_INSECURE_REGISTRIES", "http://127.0.0.1:5000"],
      ["PADDOCK_IMAGE_INSECURE_REGISTRIES", "host/path"],
      ["PADDOCK_IMAGE_CACHE_MAX_BYTES", "0"],
      ["PADDOCK_IMAGE_CACHE_MAX_BYTES", "lots"],
    ] as const) {
      expect(() => loadConfig({ ...base, [key]: bad }), `${key}=${bad}`).toThrow(ConfigError);
    }
  });

  it("refuses a missing runner id or an id that is not one subject token", () => {
    expect(() => loadConfig({ PADDOCK_RUNNER_DATA_DIR: "/tmp/x" })).toThrow(ConfigError);
    expect(() => loadConfig({ PADDOCK_RUNNER_ID: "a.b", PADDOCK_RUNNER_DATA_DIR: "/tmp/x" })).toThrow(ConfigError);
  });
});

describe("main", () => {
  const nats = useNatsServer();

  it("starts as a process, logs ready with its generation, and stops cleanly on SIGTERM", async () => {
    const scheduler = fakeScheduler(nats.nc, 0);
    const dataDir = mkdtempSync(join(tmpdir(), "paddock-runner-main-"));
    const svc = await startService("runner-agent", {
      PADDOCK_NATS_URL: nats.url,
      PADDOCK_RUNNER_ID: "main1",
      PADDOCK_RUNNER_DATA_DIR: dataDir,
    });
    expect(svc.ready).toMatchObject({ runnerId: "main1", poolId: "default", generation: 1 });
    expect(typeof svc.ready.opsPort).toBe("number");
    const ready = await fetch(`http://127.0.0.1:${String(svc.ready.opsPort)}/readyz`);
    expect(ready.status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${String(svc.ready.opsPort)}/metrics`)).text();
    expect(metrics).toContain("paddock_term_fenced_total");
    expect(await svc.stop()).toBe(0);
    scheduler.sub.unsubscribe();
    expect(readFileSync(join(dataDir, "generation"), "utf8").trim()).toBe("1");
  });
});
