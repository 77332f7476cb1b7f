/** `paddock env ...`: bad usage without a server, then each subcommand against the fake gateway. */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { useFakeGateway } from "./testing/fake-gateway.ts";
import { expectUsageError, runCli } from "./testing/run-cli.ts";

const dir = mkdtempSync(join(tmpdir(), "paddock-env-test-"));
const setupFile = join(dir, "setup.sh");
writeFileSync(setupFile, "npm ci\n");

describe("paddock env: bad usage exits 2 without a server", () => {
  const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
  it.each([
    [["env"], /expected a subcommand: create, ls, get, update or rm/],
    [["env", "frob"], /unknown subcommand "frob"/],
    [["env", "create"], /--name is required/],
    [["env", "create", "--name", "n", "extra"], /expected nothing, got "extra"/],
    [["env", "create", "--name", "n", "--setup", "x", "--setup-file", setupFile], /--setup or --setup-file, not both/],
    [["env", "create", "--name", "n", "--setup-file", join(dir, "missing.sh")], /cannot read --setup-file/],
    [["env", "create", "--name", "n", "--secret", "has-dash"], /secretRefs/],
    [["env", "create", "--name", "n", "--egress"], /--egress needs a value/],
    [["env", "create", "--name", "n", "--clear-setup"], /unknown flag --clear-setup/],
    [["env", "ls", "x"], /expected nothing/],
    [["env", "get"], /expected ID/],
    [["env", "update"], /expected ID/],
    [["env", "update", "e1"], /nothing to update/],
    [["env", "update", "e1", "--clear-egress", "--egress", "h"], /--clear-egress and --egress contradict/],
    [["env", "update", "e1", "--clear-setup", "--setup-file", setupFile], /--clear-setup and --setup\/--setup-file contradict/],
    [["env", "update", "e1", "--name", ""], /name/],
    [["env", "rm"], /expected ID\.\.\./],
  ])("%j", (argv, msg) => expectUsageError(argv, msg, env));

  it("help for env and each subcommand, with no token needed", async () => {
    for (const argv of [["env", "--help"], ["help", "env"], ["env", "create", "--help"], ["env", "update", "-h"], ["env", "rm", "--help"]]) {
      const r = await runCli(argv, {});
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/^usage: paddock env/);
    }
  });
});

describe("paddock env against the fake gateway", () => {
  const { gw, env } = useFakeGateway();

  it("create sends the fields (setup from a file, repeated flags as lists) and prints the id, or the record", async () => {
    const r = await runCli(
      ["env", "create", "--name", "node", "--image", "node:20", "--setup-file", setupFile, "--init", "make", "--egress", "github.com", "--egress", "npmjs.org", "--secret", "GH_TOKEN"],
      env,
    );
    expect(r).toEqual({ code: 0, stdout: "env1\n", stderr: "" });
    expect(gw.requests.at(-1)).toEqual({
      method: "POST",
      path: "/v1/environments",
      body: { name: "node", image: "node:20", setup: "npm ci\n", init: "make", egressAllow: ["github.com", "npmjs.org"], secretRefs: ["GH_TOKEN"] },
    });
    const j = JSON.parse((await runCli(["env", "create", "--name", "bare", "--setup", "true", "--json"], env)).stdout) as Record<string, unknown>;
    expect(j).toMatchObject({ id: "env2", name: "bare", setup: "true", egressAllow: [] });
    expect(gw.requests.at(-1)?.body).toEqual({ name: "bare", setup: "true" });
  });

  it("ls walks every page and prints a table, or a JSON array", async () => {
    gw.pageSize = 2;
    for (const name of ["a", "b", "c"]) await runCli(["env", "create", "--name", name, "--egress", "h.example"], env);
    const t = await runCli(["env", "ls"], env);
    expect(t.code).toBe(0);
    const lines = t.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+NAME\s+IMAGE\s+EGRESS\s+SECRETS\s+UPDATED$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 5))).toEqual(
      ["a", "b", "c"].map((n, i) => [`env${String(i + 1)}`, n, "-", "h.example", "-"]),
    );
    const j = JSON.parse((await runCli(["env", "ls", "--json"], env)).stdout) as Array<{ name: string }>;
    expect(j.map((e) => e.name)).toEqual(["a", "b", "c"]);
  });

  it("get prints key: value lines or JSON; an unknown id is not_found, exit 1", async () => {
    await runCli(["env", "create", "--name", "node", "--image", "node:20"], env);
    const human = await runCli(["env", "get", "env1"], env);
    expect(human.stdout).toMatch(/^name: +node$/m);
    expect(human.stdout).toMatch(/^image: +node:20$/m);
    expect((JSON.parse((await runCli(["env", "get", "env1", "--json"], env)).stdout) as { id: string }).id).toBe("env1");
    expect(await runCli(["env", "get", "nope"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: environment not found\n" });
  });

  it("update sends only what was given; --clear-* sends \"\" or []", async () => {
    await runCli(["env", "create", "--name", "node", "--image", "node:20", "--setup", "s", "--init", "i", "--egress", "h", "--secret", "S"], env);
    expect(await runCli(["env", "update", "env1", "--name", "node2", "--egress", "a", "--egress", "b"], env)).toEqual({
      code: 0,
      stdout: "env1\n",
      stderr: "",
    });
    expect(gw.requests.at(-1)).toEqual({ method: "PATCH", path: "/v1/environments/env1", body: { name: "node2", egressAllow: ["a", "b"] } });
    const cleared = await runCli(
      ["env", "update", "env1", "--clear-image", "--clear-setup", "--clear-init", "--clear-egress", "--clear-secrets", "--json"],
      env,
    );
    expect(gw.requests.at(-1)?.body).toEqual({ image: "", setup: "", init: "", egressAllow: [], secretRefs: [] });
    const j = JSON.parse(cleared.stdout) as Record<string, unknown>;
    expect(j).toMatchObject({ name: "node2", egressAllow: [], secretRefs: [] });
    expect(j).not.toHaveProperty("image");
    expect(j).not.toHaveProperty("setup");
    expect(j).not.toHaveProperty("init");
    expect(await runCli(["env", "update", "nope", "--name", "x"], env)).toEqual({ code: 1, stdout: "", stderr: "error: not_found: environment not found\n" });
  });

  it("rm prints each id deleted and fails (exit 1) on the others", async () => {
    await runCli(["env", "create", "--name", "a"], env);
    await runCli(["env", "create", "--name", "in-use"], env);
    const r = await runCli(["env", "rm", "env1", "env2", "nope"], env);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("env1\n");
    expect(r.stderr).toBe("error: conflict: env2: a live session uses this environment\nerror: not_found: nope: environment not found\n");
    expect([...gw.environments.keys()]).toEqual(["env2"]);
  });
});
