/**
 * `paddock cp` and `paddock diff` against a minimal in-process stand-in for
 * the workspace routes (it stores what is PUT and serves it back, and lists
 * the directories pushed to), plus usage errors. The real stack is exercised
 * in test/e2e/workspace.test.ts and test/e2e/cp.test.ts.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, startCli } from "./testing/run-cli.ts";

let server: Server;
let env: Record<string, string>;
/** The last uploaded body, and what GET answers (defaults to it). */
let stored = Buffer.alloc(0);
let serve: Buffer | undefined;
const requests: Array<{ method: string; url: string; contentType: string | undefined }> = [];
/** The directories pushed to (and their parents): what files/list answers. */
const dirs = new Set<string>();

beforeAll(async () => {
  server = createServer((req, res) => {
    requests.push({ method: req.method ?? "", url: req.url ?? "", contentType: req.headers["content-type"] });
    const url = new URL(req.url ?? "/", "http://x");
    if (req.headers.authorization !== "Bearer tok") {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "unauthenticated", message: "missing or invalid token" } }));
      return;
    }
    if (req.method === "PUT" && url.pathname === "/v1/sessions/s1/workspace") {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        stored = Buffer.concat(chunks);
        const segments = (url.searchParams.get("path") ?? "").split("/").filter(Boolean);
        for (let i = 1; i <= segments.length; i++) dirs.add(segments.slice(0, i).join("/"));
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ entries: 3, bytes: 10, reload: false }));
      });
      return;
    }
    if (req.method === "GET" && url.pathname === "/v1/sessions/s1/workspace") {
      const body = serve ?? stored;
      res.writeHead(200, { "content-type": "application/gzip", "content-length": String(body.length) }).end(body);
      return;
    }
    if (req.method === "GET" && url.pathname === "/v1/sessions/s1/files/list") {
      const parent = url.searchParams.get("path") ?? "";
      const entries = [...dirs].filter((d) => d.split("/").slice(0, -1).join("/") === parent).map((path) => ({ path, type: "dir", size: 0, mode: 0o755, mtime: 0 }));
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ entries, truncated: false }));
      return;
    }
    if (req.method === "GET" && url.pathname === "/v1/sessions/s1/diff") {
      const reply = { repos: [{ path: "app", diff: "+two\n", truncated: false }, { path: "new", diff: "", truncated: false, error: "no commit yet" }], truncated: false };
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(reply));
      return;
    }
    res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "session not found" } }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  env = { PADDOCK_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, PADDOCK_TOKEN: "tok" };
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function tree(): string {
  const dir = mkdtempSync(join(tmpdir(), "paddock-cp-"));
  mkdirSync(join(dir, "sub"));
  writeFileSync(join(dir, "a.txt"), "alpha\n");
  writeFileSync(join(dir, "sub", "b.bin"), Buffer.from([0, 1, 2, 255]));
  return dir;
}

describe("paddock cp", () => {
  it("uploads a directory as gzipped tar and downloads it back, byte for byte", async () => {
    const src = tree();
    const up = await runCli(["cp", src, "s1:app/dir"], env);
    expect(up).toEqual({ code: 0, stdout: "", stderr: "" });
    const put = requests.find((r) => r.method === "PUT");
    expect(put?.url).toBe("/v1/sessions/s1/workspace?path=app%2Fdir");
    expect(put?.contentType).toBe("application/gzip");
    expect(stored.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    const out = join(mkdtempSync(join(tmpdir(), "paddock-cp-out-")), "restored");
    expect((await runCli(["cp", "s1:app/dir", out], env)).code).toBe(0);
    expect(readFileSync(join(out, "a.txt"), "utf8")).toBe("alpha\n");
    expect(readFileSync(join(out, "sub", "b.bin"))).toEqual(Buffer.from([0, 1, 2, 255]));
  });

  it("draws a progress bar on a terminal stderr", async () => {
    const run = startCli(["cp", tree(), "s1:"], env);
    Object.assign(run.stderr, { isTTY: true, columns: 80 });
    expect(await run.code).toBe(0);
    expect(run.stderr.text()).toMatch(/→ s1:paddock-cp-\w+ \[#+-*\] +\d+%/);
    expect(run.stderr.text().endsWith("\n")).toBe(true);
  });

  it("refuses a malicious archive on download and writes nothing outside the target", async () => {
    const header = Buffer.alloc(512, 0);
    header.write("../escaped.txt", 0);
    header.write("0000644\0", 100);
    header.write("0000000\0", 108);
    header.write("0000000\0", 116);
    header.write("00000000004\0", 124);
    header.write("00000000000\0", 136);
    header.write("        ", 148);
    header.write("0", 156);
    header.write("ustar\0", 257);
    header.write("00", 263);
    let sum = 0;
    for (const b of header) sum += b;
    header.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    const body = Buffer.alloc(512, 0);
    body.write("evil");
    serve = gzipSync(Buffer.concat([header, body, Buffer.alloc(1024, 0)]));
    try {
      const root = mkdtempSync(join(tmpdir(), "paddock-cp-bad-"));
      const r = await runCli(["cp", "s1:", join(root, "target")], env);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/error: invalid: archive refused: path contains \.\./);
      expect(existsSync(join(root, "escaped.txt"))).toBe(false);
      expect(readdirSync(join(root, "target"))).toEqual([]);
    } finally {
      serve = undefined;
    }
  });

  it("bad usage exits 2", async () => {
    for (const argv of [["cp"], ["cp", "a"], ["cp", "a", "b"], ["cp", "s1:x", "s2:y"], ["cp", "s1:../x", "out"], ["cp", "s1:/abs", "out"], ["cp", "a", "b", "c"]]) {
      const r = await runCli(argv, env);
      expect(r.code, argv.join(" ")).toBe(2);
    }
  });

  it("a missing local path and an API error exit 1 with a code", async () => {
    expect(await runCli(["cp", "/no/such/dir", "s1:"], env)).toMatchObject({ code: 1, stderr: "error: not_found: /no/such/dir: no such file or directory\n" });
    const r = await runCli(["cp", "nope:x", mkdtempSync(join(tmpdir(), "paddock-cp-"))], env);
    expect(r).toMatchObject({ code: 1, stderr: "error: not_found: session not found\n" });
  });
});

describe("paddock diff", () => {
  it("prints each repository's diff under a header", async () => {
    const r = await runCli(["diff", "s1"], env);
    expect(r).toEqual({ code: 0, stdout: "# repo app\n+two\n# repo new (no commit yet)\n", stderr: "" });
    expect(JSON.parse((await runCli(["diff", "s1", "--json"], env)).stdout)).toMatchObject({ repos: [{ path: "app" }, { path: "new" }] });
  });

  it("bad usage exits 2", async () => {
    expect((await runCli(["diff"], env)).code).toBe(2);
    expect((await runCli(["diff", "a", "b"], env)).code).toBe(2);
    expect((await runCli(["diff", "s1", "--bogus"], env)).code).toBe(2);
  });
});
