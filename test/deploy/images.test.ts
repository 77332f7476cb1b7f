/**
 * The images and the compose file (issue 29 item 2), checked without a Docker
 * engine (none runs on these machines): deploy/Dockerfile passes the
 * dockerfile-utils validator (the Docker language server's) with every rule an
 * error, plus what matters here — per-service targets that run as a non-root
 * uid under tini, a health check on /readyz, and runtime stages that take only
 * a `pnpm deploy --prod` install and a bundle; docker-compose.yml parses, gives
 * every service its own NATS user (one isolated.conf.example declares) and a
 * health check, and has a `cluster` profile of 3 NATS nodes whose configs
 * nats-server accepts.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { validate, ValidationSeverity, type ValidatorSettings } from "dockerfile-utils";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { natsServerBinary, passwordVariable, repoRoot } from "@paddock/testing";

const SERVICES = ["scheduler", "event-recorder", "gateway", "runner-agent"] as const;
const dockerfile = readFileSync(join(repoRoot, "deploy", "Dockerfile"), "utf8");
const isolatedExample = readFileSync(join(repoRoot, "deploy", "nats", "isolated.conf.example"), "utf8");
const declaredPasswords = [...isolatedExample.matchAll(/password: \$([A-Z0-9_]+)/g)].map((m) => m[1] ?? "");

const ALL_ERRORS: ValidatorSettings = {
  deprecatedMaintainer: ValidationSeverity.ERROR,
  directiveCasing: ValidationSeverity.ERROR,
  emptyContinuationLine: ValidationSeverity.ERROR,
  instructionCasing: ValidationSeverity.ERROR,
  instructionCmdMultiple: ValidationSeverity.ERROR,
  instructionEntrypointMultiple: ValidationSeverity.ERROR,
  instructionHealthcheckMultiple: ValidationSeverity.ERROR,
  instructionJSONInSingleQuotes: ValidationSeverity.ERROR,
  instructionWorkdirRelative: ValidationSeverity.ERROR,
};

const lint = (text: string) => validate(text, ALL_ERRORS).map((d) => `line ${String(d.range.start.line + 1)}: ${d.message}`);

type Instruction = { keyword: string; args: string };
type Stage = { name: string; from: string; instructions: Instruction[] };

/** Stages of a Dockerfile: continuation lines joined, comments dropped. */
function stagesOf(text: string): Stage[] {
  const stages: Stage[] = [];
  const logical = text.replace(/\\\n(\s*#.*\n)*/g, " ").split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("#"));
  for (const line of logical) {
    const [keyword = "", ...rest] = line.split(/\s+/);
    const args = rest.join(" ");
    if (keyword.toUpperCase() === "FROM") {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args);
      stages.push({ from: m?.[1] ?? "", name: m?.[2] ?? String(stages.length), instructions: [] });
    } else {
      stages.at(-1)?.instructions.push({ keyword: keyword.toUpperCase(), args });
    }
  }
  return stages;
}

const stages = stagesOf(dockerfile);
const stage = (name: string) => {
  const s = stages.find((x) => x.name === name);
  if (s === undefined) throw new Error(`deploy/Dockerfile has no stage ${name}`);
  return s;
};
/** A stage's instructions with those of the stages it is built FROM first. */
const lineage = (name: string): Instruction[] => {
  const s = stage(name);
  return stages.some((x) => x.name === s.from) ? [...lineage(s.from), ...s.instructions] : s.instructions;
};

describe("deploy/Dockerfile", () => {
  it("passes the dockerfile-utils validator with every rule an error", () => {
    expect(lint(dockerfile)).toEqual([]);
  });

  it("the validator does catch a broken Dockerfile", () => {
    expect(lint("FROM node:20\nHEALTHCHECK --bogus=1 CMD true\nCOPY --frm=build a b\nMAINTAINER me\n")).toHaveLength(3);
  });

  it("has a target per service, each running as uid 10001 under tini with a health check on /readyz", () => {
    for (const svc of SERVICES) {
      const all = lineage(svc);
      const last = (k: string) => all.filter((i) => i.keyword === k).at(-1)?.args;
      expect(last("USER"), svc).toBe("10001:10001");
      expect(last("ENTRYPOINT")).toBe('["/usr/bin/tini", "--"]');
      expect(last("CMD")).toBe('["node", "--enable-source-maps", "dist/main.js"]');
      const health = last("HEALTHCHECK") ?? "";
      expect(health).toMatch(/^--interval=\S+ .*CMD \[/);
      expect(health).toContain("/readyz");
      // The health check asks the port the service serves /readyz on.
      expect(all.some((i) => i.keyword === "ENV" && /PADDOCK_OPS_PORT=9090/.test(i.args) && /PADDOCK_OPS_HOST=0\.0\.0\.0/.test(i.args))).toBe(true);
      expect(health).toContain("process.env.PADDOCK_OPS_PORT");
      expect(all.some((i) => i.keyword === "RUN" && /apt-get install .*\btini\b/.test(i.args))).toBe(true);
    }
  });

  it("copies into each runtime image only its service's production deploy (and the console for the gateway)", () => {
    const build = stage("build").instructions.map((i) => `${i.keyword} ${i.args}`).join("\n");
    expect(build).toMatch(/pnpm --filter "@paddock\/\$s" deploy --prod --legacy "\/out\/\$s"/);
    expect(build).toContain("for s in scheduler gateway event-recorder runner-agent;");
    expect(build).toContain("scripts/build.ts --only services");
    for (const svc of SERVICES) {
      const own = [...stage("runtime").instructions, ...stage(svc).instructions];
      const copies = own.filter((i) => i.keyword === "COPY" || i.keyword === "ADD");
      const expected = [`--from=build /out/${svc} /app`, ...(svc === "gateway" ? ["--from=build /out/console /app/console"] : [])];
      expect(copies.map((c) => c.args), svc).toEqual(expected);
      expect(stage(svc).from).toBe("runtime");
    }
    // The runtime base installs no build tools; the build stage is the only one with the workspace.
    expect(stage("runtime").instructions.some((i) => /\b(gcc|pnpm install|npm install)\b/.test(i.args))).toBe(false);
  });

  it("cleans apt lists and installs no recommends in every layer that uses apt", () => {
    for (const s of stages) {
      for (const i of s.instructions.filter((x) => x.keyword === "RUN" && x.args.includes("apt-get install"))) {
        expect(i.args, s.name).toContain("--no-install-recommends");
        expect(i.args, s.name).toContain("rm -rf /var/lib/apt/lists/*");
      }
    }
  });
});

type ComposeService = {
  profiles?: string[];
  build?: { context: string; dockerfile: string; target: string };
  command?: string[];
  environment?: Record<string, string>;
  healthcheck?: { test: string[] };
};
const compose = parse(readFileSync(join(repoRoot, "docker-compose.yml"), "utf8"), { merge: true }) as { services: Record<string, ComposeService> };
const interpolated = (value: string | undefined) => /^\$\{([A-Z0-9_]+)(:[?-][^}]*)?\}$/.exec(value ?? "")?.[1];

describe("docker-compose.yml", () => {
  it("builds each service from its Dockerfile target, with a health check on /readyz", () => {
    for (const svc of SERVICES) {
      const s = compose.services[svc];
      expect(s?.build, svc).toEqual({ context: ".", dockerfile: "deploy/Dockerfile", target: svc });
      expect(s?.healthcheck?.test.join(" ")).toContain("http://127.0.0.1:9090/readyz");
    }
  });

  it("gives every service its own NATS user, one isolated.conf.example declares, and only that user's password", () => {
    const users = new Set<string>();
    for (const svc of SERVICES) {
      const env = compose.services[svc]?.environment ?? {};
      const user = env.PADDOCK_NATS_USER ?? "";
      expect(users.has(user), svc).toBe(false);
      users.add(user);
      const variable = passwordVariable(user);
      expect(declaredPasswords).toContain(variable);
      expect(interpolated(env.PADDOCK_NATS_PASS)).toBe(variable);
      const passwordsSeen = Object.values(env).map(interpolated).filter((v) => v?.endsWith("_PASS"));
      expect(passwordsSeen).toEqual([variable]);
    }
  });

  it("has a health check on every NATS node, each node reading every password the users name", () => {
    const nodes = Object.entries(compose.services).filter(([name]) => /^nats(-\d)?$/.test(name));
    expect(nodes.map(([n]) => n).sort()).toEqual(["nats", "nats-1", "nats-2", "nats-3"]);
    for (const [name, s] of nodes) {
      expect(s.healthcheck?.test.join(" "), name).toContain("/healthz");
      expect(Object.keys(s.environment ?? {}).sort()).toEqual([...declaredPasswords].sort());
    }
  });

  it("has a `cluster` profile of 3 NATS nodes, and the services follow it through cluster.env", () => {
    const cluster = Object.entries(compose.services).filter(([, s]) => s.profiles?.includes("cluster"));
    expect(cluster.map(([n]) => n).sort()).toEqual(["nats-1", "nats-2", "nats-3"]);
    expect(compose.services.nats?.profiles).toEqual(["single"]);
    const clusterEnv = readFileSync(join(repoRoot, "deploy", "compose", "cluster.env"), "utf8");
    expect(clusterEnv).toContain("PADDOCK_NATS_URL=nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222");
    expect(clusterEnv).toContain("PADDOCK_REPLICAS=3");
    for (const svc of SERVICES) {
      expect(interpolated(compose.services[svc]?.environment?.PADDOCK_NATS_URL)).toBe("PADDOCK_NATS_URL");
      expect(interpolated(compose.services[svc]?.environment?.PADDOCK_REPLICAS)).toBe("PADDOCK_REPLICAS");
    }
  });

  it.each(["nats", "nats-1", "nats-2", "nats-3"])("%s's config is valid for nats-server, per-service users included", (name) => {
    const command = compose.services[name]?.command ?? [];
    const conf = command[1]?.replace(/^\/etc\/paddock\//, "") ?? "";
    expect(command[0]).toBe("-c");
    const env = { ...process.env, ...Object.fromEntries(declaredPasswords.map((v) => [v, "example-password"])) };
    const r = spawnSync(natsServerBinary(), ["-c", join(repoRoot, "deploy", conf), "-t"], { encoding: "utf8", env });
    expect(r.stdout + r.stderr).toContain("is valid");
    expect(r.status).toBe(0);
  });
});
