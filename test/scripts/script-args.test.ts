/**
 * The command lines of `npm run up`, `pnpm bench` and `pnpm chaos`: every bad
 * flag or value is a one-line usage error (exit 2) before anything starts,
 * `--help` is the usage (exit 0), and good flags parse to what they say.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseScriptFlags, repoRoot, ScriptUsageError, tsxBin, type ScriptArgs } from "@paddock/testing";
import { BENCH_GROUPS, parseBenchArgs } from "../../bench/src/args.ts";
import { CHAOS_SCENARIOS, parseChaosArgs } from "../../chaos/src/args.ts";
import { parseUpArgs, upPreviewOrigin } from "../../scripts/up-args.ts";

function values<V>(parsed: ScriptArgs<V>): V {
  if (parsed.help) throw new Error("expected values, got help");
  return parsed.values;
}

function usageError(parse: () => unknown): ScriptUsageError {
  try {
    parse();
  } catch (err) {
    if (err instanceof ScriptUsageError) return err;
    throw err;
  }
  throw new Error("expected a ScriptUsageError");
}

describe("parseScriptFlags", () => {
  const spec = { on: { type: "boolean" }, name: { type: "string" } } as const;

  it("reads switches and both value spellings", () => {
    const flags = values(parseScriptFlags("s", ["--on", "--name=a"], spec));
    expect(flags.get("on")).toBe(true);
    expect(flags.get("name")).toBe("a");
    expect(values(parseScriptFlags("s", ["--name", "b"], spec)).get("name")).toBe("b");
  });

  it("answers help for --help or -h anywhere, even beside bad flags", () => {
    expect(parseScriptFlags("s", ["--help"], spec).help).toBe(true);
    expect(parseScriptFlags("s", ["--bogus", "-h"], spec).help).toBe(true);
  });

  it.each([
    [["--bogus"], /unknown option '--bogus'/i],
    [["-x"], /unknown option '-x'/i],
    [["stray"], /unexpected argument 'stray'/i],
    [["--name"], /argument missing/i],
    [["--on=yes"], /does not take an argument/i],
  ])("rejects %j with a one-line error naming the script", (argv, message) => {
    const err = usageError(() => parseScriptFlags("s", argv, spec));
    expect(err.code).toBe("usage");
    expect(err.message).toMatch(/^s: /);
    expect(err.message).toMatch(message);
    expect(err.message).not.toContain("\n");
  });
});

describe("chaos args", () => {
  it("defaults to every scenario, a fresh seed, full size", () => {
    const args = values(parseChaosArgs([]));
    expect(args).toEqual({ quick: false, seed: undefined, only: new Set(CHAOS_SCENARIOS), keepData: false });
  });

  it("reads --quick, --seed, --only and --keep-data", () => {
    const args = values(parseChaosArgs(["--quick", "--seed", "4294967295", "--only", "broker, takeovers,broker", "--keep-data"]));
    expect(args.quick).toBe(true);
    expect(args.seed).toBe(4_294_967_295);
    expect([...args.only]).toEqual(["broker", "takeovers"]);
    expect(args.keepData).toBe(true);
    expect(values(parseChaosArgs(["--seed=0"])).seed).toBe(0);
  });

  it.each([["abc"], ["-1"], ["4294967296"], ["1.5"], ["0x10"], [""]])("rejects --seed %j rather than running with another seed", (seed) => {
    expect(usageError(() => parseChaosArgs([`--seed=${seed}`])).message).toMatch(/^chaos: --seed must be an integer from 0 to 4294967295/);
  });

  it.each([["crash"], ["takeovers,"], [""]])("rejects --only %j naming the choices", (only) => {
    expect(usageError(() => parseChaosArgs([`--only=${only}`])).message).toMatch(/expected a comma-separated list of takeovers, bad-input, crashes, broker, upgrade$/);
  });
});

describe("bench args", () => {
  it("defaults to every group at full size and reads --quick and --only", () => {
    expect(values(parseBenchArgs([]))).toEqual({ quick: false, only: new Set(BENCH_GROUPS) });
    expect(values(parseBenchArgs(["--quick", "--only", "memory,terminal"]))).toEqual({ quick: true, only: new Set(["memory", "terminal"]) });
  });

  it("rejects an unknown group, a stray argument and a value on --quick", () => {
    expect(usageError(() => parseBenchArgs(["--only", "latency"])).message).toMatch(/^bench: --only: unknown "latency"/);
    expect(usageError(() => parseBenchArgs(["quick"])).message).toMatch(/^bench: .*'quick'/);
    expect(usageError(() => parseBenchArgs(["--quick=1"])).message).toMatch(/^bench: /);
  });
});

describe("up args", () => {
  it("defaults to port 8080, .data, a free NATS port, one runner of capacity 8", () => {
    expect(values(parseUpArgs([]))).toEqual({ httpPort: 8080, dataDir: ".data", natsPort: -1, runners: 1, capacity: 8, stopGraceMs: 15_000 });
    expect(values(parseUpArgs(["--http-port", "0", "--data-dir", "/tmp/x", "--nats-port=4222", "--runners=3", "--capacity", "2", "--stop-grace-ms", "0"]))).toEqual({
      httpPort: 0,
      dataDir: "/tmp/x",
      natsPort: 4222,
      runners: 3,
      capacity: 2,
      stopGraceMs: 0,
    });
  });

  it.each([
    [["--http-port", "65536"], /--http-port must be an integer from 0 to 65535/],
    [["--http-port", "80a"], /--http-port must be an integer/],
    [["--nats-port=-2"], /--nats-port must be an integer from -1/],
    [["--nats-port", "-2"], /argument is ambiguous; .*'--nats-port=-XYZ'/],
    [["--runners", "0"], /--runners must be an integer from 1 to 64/],
    [["--capacity", "1e3"], /--capacity must be an integer from 1 to 1024/],
    [["--data-dir="], /--data-dir needs a value/],
    [["--stop-grace-ms", "600001"], /--stop-grace-ms must be an integer from 0 to 600000/],
    [["--stop-grace-ms", "1.5"], /--stop-grace-ms must be an integer/],
    [["--stop-grace-ms="], /--stop-grace-ms must be an integer from 0 to 600000, got ""/],
  ])("rejects %j", (argv, message) => {
    expect(usageError(() => parseUpArgs(argv)).message).toMatch(message);
  });
});

describe("the scripts themselves", () => {
  const run = (script: string, argv: string[]) =>
    spawnSync(tsxBin, [script, ...argv], { cwd: repoRoot, encoding: "utf8", env: { ...process.env }, timeout: 30_000 });

  it.each([["chaos/run.ts"], ["bench/run.ts"], ["scripts/up.ts"]])("%s --help prints the usage and exits 0", (script) => {
    const r = run(script, ["--help"]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^usage: /);
    expect(r.stdout).toContain("--help");
  });

  it.each([
    ["chaos/run.ts", ["--bogus"], "chaos: Unknown option '--bogus'"],
    ["chaos/run.ts", ["--seed", "abc"], "chaos: --seed must be an integer"],
    ["bench/run.ts", ["--only", "nope"], 'bench: --only: unknown "nope"'],
  ])("%s %j exits 2 with one line and the usage, no stack trace", (script, argv, first) => {
    const r = run(script, argv);
    expect(r.status).toBe(2);
    expect(r.stderr.split("\n")[0]).toContain(first);
    expect(r.stderr).toContain("usage: ");
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe("");
  });

  it("the bootstrap refuses an unknown command before installing anything, and --help is its usage", () => {
    const bad = spawnSync(process.execPath, ["scripts/bootstrap.mjs", "bnech"], { cwd: repoRoot, encoding: "utf8", timeout: 30_000 });
    expect(bad.status).toBe(2);
    expect(bad.stderr.split("\n")[0]).toBe('bootstrap: unknown command "bnech"; expected up, test, bench, chaos, build');
    expect(bad.stderr).not.toContain("[bootstrap]");
    const help = spawnSync(process.execPath, ["scripts/bootstrap.mjs", "--help"], { cwd: repoRoot, encoding: "utf8", timeout: 30_000 });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: node scripts\/bootstrap\.mjs <up\|test\|bench\|chaos\|build>/);
  });

  it("up with a bad port creates nothing: no data dir, no server", () => {
    const parent = mkdtempSync(join(tmpdir(), "paddock-up-args-"));
    const dataDir = join(parent, "data");
    const r = run("scripts/up.ts", ["--data-dir", dataDir, "--http-port", "99999"]);
    expect(r.status).toBe(2);
    expect(r.stderr.split("\n")[0]).toBe('up: --http-port must be an integer from 0 to 65535, got "99999"');
    expect(existsSync(dataDir)).toBe(false);
    rmSync(parent, { recursive: true, force: true });
  });
});

describe("up's previews by host", () => {
  it("are on preview.localhost at the gateway's port unless the caller names an origin; none on a port learned at start", () => {
    expect(upPreviewOrigin(8080, {})).toEqual({ PADDOCK_PREVIEW_ORIGIN: "http://preview.localhost:8080" });
    expect(upPreviewOrigin(8080, { PADDOCK_PREVIEW_ORIGIN: "https://p.example.com" })).toEqual({ PADDOCK_PREVIEW_ORIGIN: "https://p.example.com" });
    expect(upPreviewOrigin(0, {})).toEqual({});
  });
});
