/**
 * Real git servers on loopback for clone tests: `git http-backend` behind a
 * small HTTP server that runs it as CGI (optionally asking for a token), and
 * `git daemon` on a port found free (outside the ephemeral range, as nats-cluster's). Plus a source repository with a branch,
 * a tag and commits to clone.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./nats-cluster.ts";

export interface SourceRepo {
  /** The directory holding the repositories (a server's root). */
  root: string;
  /** The repository's directory name under root. */
  name: string;
  /** Commits: `first` (tagged v1), `main` (main's head), `feature` (the feature branch's head). */
  commits: { first: string; main: string; feature: string };
}

const gitIn = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" }).trim();

/** A repository `<root>/<name>.git` (non-bare, readable by everyone) with main, feature and tag v1; fetching any commit by id is allowed. */
export function makeSourceRepo(name = "project"): SourceRepo {
  const root = mkdtempSync(join(tmpdir(), "paddock-git-src-"));
  const dir = join(root, `${name}.git`);
  mkdirSync(dir);
  gitIn(dir, "init", "-q");
  writeFileSync(join(dir, "README.md"), "first\n");
  gitIn(dir, "add", ".");
  gitIn(dir, "commit", "-q", "-m", "first");
  const first = gitIn(dir, "rev-parse", "HEAD");
  gitIn(dir, "tag", "v1");
  writeFileSync(join(dir, "README.md"), "second\n");
  gitIn(dir, "commit", "-q", "-am", "second");
  const main = gitIn(dir, "rev-parse", "HEAD");
  gitIn(dir, "checkout", "-q", "-b", "feature");
  writeFileSync(join(dir, "feature.txt"), "feature\n");
  gitIn(dir, "add", ".");
  gitIn(dir, "commit", "-q", "-m", "feature");
  const feature = gitIn(dir, "rev-parse", "HEAD");
  gitIn(dir, "checkout", "-q", "main");
  gitIn(dir, "config", "uploadpack.allowAnySHA1InWant", "true");
  // Sessions of other uids clone it (file://): everyone may read, and git must trust its owner.
  execFileSync("chmod", ["-R", "a+rX", root]);
  return { root, name, commits: { first, main, feature } };
}

/** Marks every directory as safe for git, for users other than its owner (a session's uid cloning file://). */
export const SAFE_DIRECTORY_ENV = { GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "safe.directory", GIT_CONFIG_VALUE_0: "*" };

export interface GitHttpServer {
  url: string;
  port: number;
  /** Authorization headers received (to show a token reached the server). */
  authorizations: string[];
  close(): Promise<void>;
}

/**
 * `git http-backend` over HTTP on 127.0.0.1 serving root. With token, every
 * request must carry `Authorization: Basic base64(x-access-token:<token>)`
 * (else 401), as a forge's smart HTTP does.
 */
export async function startGitHttpServer(root: string, opts: { token?: string } = {}): Promise<GitHttpServer> {
  const authorizations: string[] = [];
  const expected = opts.token === undefined ? undefined : `Basic ${Buffer.from(`x-access-token:${opts.token}`).toString("base64")}`;
  const server: Server = createServer((req, res) => {
    const auth = req.headers.authorization;
    if (auth) authorizations.push(auth);
    if (expected !== undefined && auth !== expected) {
      res.writeHead(401, { "www-authenticate": 'Basic realm="git"' }).end();
      return;
    }
    const url = new URL(req.url ?? "/", "http://x");
    const cgi = spawn("git", ["http-backend"], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        GIT_CONFIG_COUNT: "1",
        GIT_CONFIG_KEY_0: "safe.directory",
        GIT_CONFIG_VALUE_0: "*",
        REQUEST_METHOD: req.method ?? "GET",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        REMOTE_ADDR: "127.0.0.1",
        ...(req.headers["content-encoding"] ? { HTTP_CONTENT_ENCODING: req.headers["content-encoding"] } : {}),
        ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
      },
      stdio: ["pipe", "pipe", "ignore"],
    });
    (req as IncomingMessage).pipe(cgi.stdin);
    cgi.stdin.on("error", () => undefined);
    relayCgi(cgi, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    authorizations,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Reads the CGI's header block, then streams its body. */
function relayCgi(cgi: ChildProcess, res: ServerResponse): void {
  let head = Buffer.alloc(0);
  let headersDone = false;
  cgi.stdout?.on("data", (chunk: Buffer) => {
    if (headersDone) {
      res.write(chunk);
      return;
    }
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    headersDone = true;
    let status = 200;
    for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon < 0) continue;
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === "status") status = Number(value.split(" ")[0]);
      else res.setHeader(name, value);
    }
    res.writeHead(status);
    res.write(head.subarray(end + 4));
  });
  cgi.on("close", () => {
    if (!headersDone) res.writeHead(502);
    res.end();
  });
}

export interface GitDaemon {
  url: string;
  close(): void;
}

/** `git daemon` exporting root on 127.0.0.1 (git:// URLs), answering once it accepts connections. */
export async function startGitDaemon(root: string): Promise<GitDaemon> {
  const port = await freePort();
  const daemon = spawn("git", ["daemon", "--export-all", "--reuseaddr", `--base-path=${root}`, "--listen=127.0.0.1", `--port=${port}`, root], {
    stdio: "ignore",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "safe.directory", GIT_CONFIG_VALUE_0: "*" },
  });
  for (let i = 0; i < 200; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, "127.0.0.1");
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (up) return { url: `git://127.0.0.1:${port}`, close: () => daemon.kill("SIGKILL") };
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  daemon.kill("SIGKILL");
  throw new Error("git daemon did not start");
}
