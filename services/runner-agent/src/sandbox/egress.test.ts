import { execFileSync } from "node:child_process";
import { createServer, request, type Server } from "node:http";
import { connect as netConnect, type AddressInfo, type Socket } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { provision } from "@paddock/bus";
import type { DispatchCommand, PortableSpec } from "@paddock/contracts";
import { createLogger, silentLogger } from "@paddock/logging";
import { useNatsServer } from "@paddock/testing/vitest";
import { egressEnv, egressRefusals, hostAllowed, startEgressProxy, type EgressProxy } from "./egress.ts";
import { collectFacts, collectTerm, counterValue, dispatchTo, eventually, fakeScheduler, testAgent, type TestAgent } from "../testing/test-support.ts";

/** Two upstreams on loopback: one reached by the listed name `localhost`, the other by the unlisted `127.0.0.1`. */
let listed: Server;
let unlisted: Server;
let listedUrl: string;
let unlistedUrl: string;

function upstream(body: string): Promise<Server> {
  const s = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "text/plain" }).end(`${body} ${req.method} ${req.url} host=${req.headers.host}`));
  });
  return new Promise((resolve) => s.listen(0, "127.0.0.1", () => resolve(s)));
}
const portOf = (s: Server) => (s.address() as AddressInfo).port;

beforeAll(async () => {
  listed = await upstream("listed");
  unlisted = await upstream("unlisted");
  listedUrl = `http://localhost:${portOf(listed)}`;
  unlistedUrl = `http://127.0.0.1:${portOf(unlisted)}`;
});
afterAll(async () => {
  listed.closeAllConnections();
  unlisted.closeAllConnections();
  await Promise.all([listed, unlisted].map((s) => new Promise((resolve) => s.close(resolve))));
});

/** An absolute-URI request through the proxy: the proxy is the host, the URL the path. */
function viaProxy(proxy: EgressProxy, url: string, method = "GET", body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: proxy.port, method, path: url, headers: { host: url.startsWith("http://") ? new URL(url).host : "x" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** CONNECT host:port through the proxy, then (when tunneled) a plain HTTP/1.1 GET inside the tunnel. */
function viaTunnel(proxy: EgressProxy, authority: string): Promise<{ connectStatus: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: proxy.port, method: "CONNECT", path: authority, headers: { host: authority } });
    req.on("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        resolve({ connectStatus: res.statusCode ?? 0, body: "" });
        return;
      }
      const chunks: Buffer[] = [];
      socket.on("data", (c: Buffer) => chunks.push(c));
      socket.on("end", () => resolve({ connectStatus: 200, body: Buffer.concat(chunks).toString("utf8") }));
      socket.on("error", reject);
      socket.write(`GET /tunneled HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`);
    });
    req.on("error", reject);
    req.end();
  });
}

describe("hostAllowed", () => {
  it.each([
    [["localhost"], "localhost", true],
    [["LocalHost"], "localhost.", true],
    [["localhost"], "127.0.0.1", false],
    [["example.com"], "EXAMPLE.com", true],
    [["example.com"], "a.example.com", false],
    [["*.example.com"], "a.example.com", true],
    [["*.example.com"], "a.b.EXAMPLE.com", true],
    [["*.example.com"], "example.com", false],
    [["*.example.com"], "badexample.com", false],
    [["*.example.com"], "example.com.evil.test", false],
    [["127.0.0.1"], "127.0.0.1", true],
    [["::1"], "[::1]", true],
    [[], "localhost", false],
    [["*."], "a.", false],
  ] as Array<[string[], string, boolean]>)("%j allows %s: %s", (allow, host, want) => {
    expect(hostAllowed(allow, host)).toBe(want);
  });

  it("egressEnv points every proxy variable at the proxy and leaves NO_PROXY empty", () => {
    const env = egressEnv("http://127.0.0.1:9");
    for (const k of ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"]) expect(env[k]).toBe("http://127.0.0.1:9");
    expect(env.NO_PROXY).toBe("");
  });
});

describe("egress proxy", () => {
  let proxy: EgressProxy;
  let registry: Registry;
  const logLines: string[] = [];
  beforeAll(async () => {
    registry = new Registry();
    const destination = new Writable({
      write(chunk: Buffer, _enc, cb) {
        logLines.push(chunk.toString("utf8"));
        cb();
      },
    });
    proxy = await startEgressProxy({
      allow: ["localhost"],
      log: createLogger({ service: "egress-test", level: "debug", destination }),
      refused: egressRefusals(registry),
    });
  });
  afterAll(() => proxy.close());

  it("listens on loopback only", () => {
    expect(proxy.url).toBe(`http://127.0.0.1:${proxy.port}`);
  });

  it("forwards an absolute-URI request to a listed host, body both ways", async () => {
    const r = await viaProxy(proxy, `${listedUrl}/hello?x=1`, "POST", "secret-request-body");
    expect(r.status).toBe(200);
    expect(r.body).toBe(`listed POST /hello?x=1 host=localhost:${portOf(listed)}`);
  });

  it("refuses an absolute-URI request to an unlisted host with 403 and counts it", async () => {
    const before = await counterValue(egressRefusals(registry));
    const r = await viaProxy(proxy, `${unlistedUrl}/x`, "POST", "secret-request-body");
    expect(r.status).toBe(403);
    expect(r.body).not.toContain("unlisted GET");
    expect(await counterValue(egressRefusals(registry))).toBe(before + 1);
  });

  it("tunnels CONNECT to a listed host and refuses an unlisted one with 403", async () => {
    const ok = await viaTunnel(proxy, `localhost:${portOf(listed)}`);
    expect(ok.connectStatus).toBe(200);
    expect(ok.body).toContain("200 OK");
    expect(ok.body).toContain("listed GET /tunneled");
    const before = await counterValue(egressRefusals(registry));
    const no = await viaTunnel(proxy, `127.0.0.1:${portOf(unlisted)}`);
    expect(no.connectStatus).toBe(403);
    expect(await counterValue(egressRefusals(registry))).toBe(before + 1);
  });

  it("answers 400 to an origin-form request and to a malformed CONNECT target", async () => {
    const origin = await viaProxy(proxy, "/not-absolute");
    expect(origin.status).toBe(400);
    const bad = await viaTunnel(proxy, "localhost");
    expect(bad.connectStatus).toBe(400);
  });

  it("logs refused host names at debug, never bodies or paths", () => {
    const all = logLines.join("");
    expect(all).toContain('"host":"127.0.0.1"');
    expect(all).toContain('"level":20');
    expect(all).not.toContain("secret-request-body");
    expect(all).not.toContain("/x");
  });

  it("counts every byte the sandbox side sends and receives, tunnels and forwarded requests alike", async () => {
    const other = await startEgressProxy({ allow: ["localhost"], log: silentLogger(), refused: egressRefusals(registry) });
    expect(other.bytes()).toBe(0);
    // A tunnel: the client's own socket says what crossed; it waits for the whole answer, so the proxy has read all it sent.
    const client = await new Promise<Socket>((resolve, reject) => {
      const s = netConnect(other.port, "127.0.0.1", () => s.write(`CONNECT localhost:${portOf(listed)} HTTP/1.1\r\nHost: x\r\n\r\n`));
      let got = "";
      s.on("data", (c: Buffer) => {
        got += c.toString("utf8");
        if (got.includes("200 Connection Established\r\n\r\n") && !got.includes("GET /")) s.write(`GET /${"x".repeat(5_000)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      });
      s.once("end", () => resolve(s));
      s.once("error", reject);
    });
    const tunneled = client.bytesRead + client.bytesWritten;
    expect(tunneled).toBeGreaterThan(5_000);
    expect(other.bytes()).toBe(tunneled);
    client.destroy();
    const forwarded = await viaProxy(other, `${listedUrl}/again`, "POST", "b".repeat(1_000));
    expect(forwarded.status).toBe(200);
    expect(other.bytes()).toBeGreaterThan(tunneled + 1_000 + forwarded.body.length);
    await other.close();
    // Still answered after close: the usage report reads it when the generation ends.
    expect(other.bytes()).toBeGreaterThan(tunneled + 1_000);
  });

  it("close cuts open tunnels and stops listening", async () => {
    const other = await startEgressProxy({ allow: ["localhost"], log: silentLogger(), refused: egressRefusals(registry) });
    const tunnel = await new Promise<Socket>((resolve, reject) => {
      const s = netConnect(other.port, "127.0.0.1", () => s.write(`CONNECT localhost:${portOf(listed)} HTTP/1.1\r\nHost: x\r\n\r\n`));
      s.once("data", () => resolve(s));
      s.once("error", reject);
    });
    const closed = new Promise((resolve) => tunnel.once("close", resolve));
    await other.close();
    await closed;
    await expect(
      new Promise((resolve, reject) => {
        const s = netConnect(other.port, "127.0.0.1", () => resolve(s));
        s.once("error", reject);
      }),
    ).rejects.toThrow();
  });
});

function hasCurl(): boolean {
  try {
    execFileSync("which", ["curl"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

describe("egress in a session", () => {
  const nats = useNatsServer();
  let t: TestAgent;
  beforeAll(async () => {
    await provision(nats.nc, { replicas: 1 });
    const scheduler = fakeScheduler(nats.nc, 0);
    t = testAgent(nats.nc);
    await t.agent.start();
    scheduler.sub.unsubscribe();
  });
  afterAll(async () => {
    // Before the server stops: after-all hooks run last-registered first.
    await t.agent.stop();
  });

  /**
   * The app reaches both upstreams through the proxy the runner hands it in
   * its environment, as absolute-URI HTTP and as a CONNECT tunnel. curl when
   * present (it honors http_proxy); else node's http.request with the proxy
   * as host (node's fetch ignores HTTP_PROXY).
   */
  function appCmd(): string[] {
    if (hasCurl()) {
      const probe = (label: string, url: string, tunnel: boolean) =>
        `echo "${label}=$(curl -s ${tunnel ? "-p" : ""} -w ' code=%{http_code} connect=%{http_connect}' "${url}/p" 2>/dev/null | tr -d '\\n')"`;
      return [
        "sh",
        "-c",
        [`echo "proxy=$http_proxy noproxy=[$NO_PROXY]"`, probe("HTTP_LISTED", listedUrl, false), probe("HTTP_UNLISTED", unlistedUrl, false), probe("TUN_LISTED", listedUrl, true), probe("TUN_UNLISTED", unlistedUrl, true)].join("; "),
      ];
    }
    const script = `
      const http = require("node:http");
      const p = new URL(process.env.HTTP_PROXY);
      const get = (url) => new Promise((resolve) => {
        const r = http.request({ host: p.hostname, port: p.port, path: url + "/p", headers: { host: new URL(url).host } }, (res) => {
          let b = ""; res.on("data", (c) => (b += c)); res.on("end", () => resolve(b.replace(/\\n/g, " ") + " code=" + res.statusCode));
        });
        r.on("error", (e) => resolve("error " + e.code)); r.end();
      });
      const tun = (url) => new Promise((resolve) => {
        const u = new URL(url);
        const r = http.request({ host: p.hostname, port: p.port, method: "CONNECT", path: u.host });
        r.on("connect", (res, s) => {
          if (res.statusCode !== 200) { s.destroy(); return resolve(" code=000 connect=" + res.statusCode); }
          let b = ""; s.on("data", (c) => (b += c)); s.on("end", () => resolve(b.replace(/\\r?\\n/g, " ") + " code=200 connect=200"));
          s.write("GET /p HTTP/1.1\\r\\nHost: " + u.host + "\\r\\nConnection: close\\r\\n\\r\\n");
        });
        r.on("error", (e) => resolve("error " + e.code)); r.end();
      });
      (async () => {
        console.log("proxy=" + process.env.http_proxy + " noproxy=[" + process.env.NO_PROXY + "]");
        console.log("HTTP_LISTED=" + (await get(${JSON.stringify(listedUrl)})));
        console.log("HTTP_UNLISTED=" + (await get(${JSON.stringify(unlistedUrl)})));
        console.log("TUN_LISTED=" + (await tun(${JSON.stringify(listedUrl)})));
        console.log("TUN_UNLISTED=" + (await tun(${JSON.stringify(unlistedUrl)})));
      })();`;
    return [process.execPath, "-e", script];
  }

  it("a listed host is reachable through the session's proxy and an unlisted one is refused", async () => {
    const sessionId = "egress1";
    const facts = collectFacts(nats.nc, t.config.poolId, t.config.runnerId);
    const term = collectTerm(nats.nc, sessionId, "main");
    const refusedBefore = await counterValue(egressRefusals(t.metrics.registry));
    const spec: PortableSpec = { cmd: appCmd(), egressAllow: ["localhost"] };
    await dispatchTo(nats.nc, t, { type: "start", sessionId, workspaceId: "ws1", runnerGeneration: t.agent.generation, placementGeneration: 1, spec, mode: "run", trigger: "initial" } as DispatchCommand);
    await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    await eventually(() => term.text().includes("TUN_UNLISTED="), () => `app output: ${term.text()}`);
    const text = term.text();
    const line = (label: string) => new RegExp(`${label}=(.*)`).exec(text)?.[1] ?? "";

    // The proxy listens on the runner's end of the session's own network (bwrap), reachable from inside it alone;
    // the gateway's relay there is reached directly (NO_PROXY), everything else through the proxy.
    expect(text).toMatch(/proxy=http:\/\/(10\.\d+\.\d+\.\d+):\d+ noproxy=\[\1\]/);
    expect(line("HTTP_LISTED")).toContain(`listed GET /p host=localhost:${portOf(listed)}`);
    expect(line("HTTP_LISTED")).toContain("code=200");
    expect(line("HTTP_UNLISTED")).toContain("code=403");
    expect(line("HTTP_UNLISTED")).not.toContain("unlisted GET");
    expect(line("TUN_LISTED")).toContain("listed GET /p");
    expect(line("TUN_LISTED")).toContain("connect=200");
    expect(line("TUN_UNLISTED")).toContain("connect=403");
    expect(line("TUN_UNLISTED")).not.toContain("unlisted GET");
    expect(await counterValue(egressRefusals(t.metrics.registry))).toBe(refusedBefore + 2);
    // What passed the proxy is the generation's network use, reported on the fact that ends it.
    const exited = await facts.waitFor((f) => f.sessionId === sessionId && f.type === "exited");
    expect(exited.type === "exited" ? exited.usage?.networkBytes : undefined).toBeGreaterThan(4 * 100);

    // The session ended: its proxy stopped with it.
    const [, host = "", port = NaN] = /proxy=http:\/\/([\d.]+):(\d+)/.exec(text) ?? [];
    await eventually(
      () =>
        new Promise<boolean>((resolve) => {
          const s = netConnect(Number(port), host, () => {
            s.destroy();
            resolve(false);
          });
          s.once("error", () => resolve(true));
        }),
      "the session's proxy stopped after exit",
    );
  });
});
