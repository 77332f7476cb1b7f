import { describe, expect, it } from "vitest";
import { extractGlobalFlags, parseArgs } from "./args.ts";
import { loadCliConfig, DEFAULT_URL } from "./config.ts";
import { UsageError } from "./io.ts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

const spec = { name: { type: "string" }, view: { type: "boolean", short: "v" }, limit: { type: "int" } } as const;

describe("parseArgs", () => {
  it("reads flags in both forms, positionals and the rest after --", () => {
    const r = parseArgs(["a", "--name", "x", "--limit=3", "-v", "b", "--", "sh", "--name"], spec);
    expect(r.flags).toEqual({ name: "x", limit: 3, view: true });
    expect(r.positionals).toEqual(["a", "b"]);
    expect(r.rest).toEqual(["sh", "--name"]);
  });

  it("collects a repeatable list flag in order, in both forms", () => {
    const r = parseArgs(["--egress", "a", "--egress=b", "x"], { egress: { type: "list" } });
    expect(r.flags).toEqual({ egress: ["a", "b"] });
    expect(r.positionals).toEqual(["x"]);
    expect(parseArgs([], { egress: { type: "list" } }).flags.egress).toBeUndefined();
  });

  it("starts the command at the first positional when asked", () => {
    const r = parseArgs(["--view", "ls", "-la"], spec, { commandAtFirstPositional: true });
    expect(r.flags).toEqual({ view: true });
    expect(r.rest).toEqual(["ls", "-la"]);
  });

  it.each([
    [["--nope"], /unknown flag --nope/],
    [["-x"], /unknown flag -x/],
    [["--name"], /--name needs a value/],
    [["--view=1"], /takes no value/],
    [["--limit", "0"], /positive integer/],
    [["--limit", "ten"], /positive integer/],
  ])("refuses %j", (argv, msg) => {
    expect(() => parseArgs(argv, spec)).toThrow(UsageError);
    expect(() => parseArgs(argv, spec)).toThrow(msg);
  });
});

describe("loadCliConfig", () => {
  it("prefers flags over env and strips them from argv", () => {
    const c = loadCliConfig(["ls", "--url", "http://h:1/", "--token=t1", "--all"], { PADDOCK_URL: "http://e:2", PADDOCK_TOKEN: "t2" });
    expect(c).toEqual({ url: "http://h:1", token: "t1", argv: ["ls", "--all"] });
  });

  it("falls back to env, then the default URL", () => {
    expect(loadCliConfig(["ls"], { PADDOCK_TOKEN: "t" })).toEqual({ url: DEFAULT_URL, token: "t", argv: ["ls"] });
    expect(loadCliConfig([], { PADDOCK_URL: "https://e", PADDOCK_TOKEN: "" }).token).toBeUndefined();
  });

  it("leaves flags after -- to the command", () => {
    expect(extractGlobalFlags(["run", "--", "x", "--token", "y"]).rest).toEqual(["run", "--", "x", "--token", "y"]);
  });

  it("refuses a URL that is not http(s)", () => {
    expect(() => loadCliConfig(["--url", "ftp://x", "ls"], {})).toThrow(UsageError);
  });
});

describe("bad invocations exit 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["frobnicate"], /unknown command "frobnicate"/],
    [["ls", "--bogus"], /paddock ls: unknown flag --bogus/],
    [["run"], /no command given/],
    [["run", "--name", "x"], /no command given/],
    [["run", "--name", "has space", "--", "true"], /name/],
    [["get"], /expected ID/],
    [["get", "a", "b"], /expected ID/],
    [["rm"], /expected ID\.\.\./],
    [["attach", "s1", "--since", "yesterday"], /--since/],
    [["--url"], /--url needs a value/],
    [[], /usage: paddock/],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("a missing token is a usage error", async () => {
    const r = await runCli(["ls"], { PADDOCK_URL: "http://127.0.0.1:9" });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no API token: run 'paddock login', pass --token TOKEN or set PADDOCK_TOKEN/);
  });

  it("--help needs no token and exits 0", async () => {
    for (const argv of [["--help"], ["ls", "--help"], ["run", "-h"], ["help", "attach"], ["logs", "--bogus", "--help"]]) {
      const r = await runCli(argv, {});
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/usage: paddock/);
    }
  });

  it("an unreachable gateway is an API error, exit 1", async () => {
    const r = await runCli(["ls"], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: unavailable: cannot reach the gateway/);
  });
});
