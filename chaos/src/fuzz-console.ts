/**
 * The bad-input scenario's console case (issue 27): the web console the
 * gateway serves at `/`, and the same-origin check on state-changing calls.
 * Traversal in every spelling (dots, encoded dots and slashes, NUL,
 * backslashes) must be 404 and never show a file from outside the build; a
 * POST/PUT/PATCH/DELETE from a foreign origin must be 403 `forbidden` and
 * change nothing (KV and object stores compared before and after).
 */
import { request } from "node:http";
import { api, waitFor } from "./client.ts";
import { diffState, feedsDrained, snapshotState } from "./checks.ts";
import { countStatus, excerpt, type FuzzContext } from "./fuzz-context.ts";
import { log } from "./report.ts";

const TRAVERSALS = [
  "/assets/../../etc/passwd",
  "/assets/../../../../../../etc/passwd",
  "/assets/%2e%2e/%2e%2e/etc/passwd",
  "/assets/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
  "/%2e%2e/package.json",
  "/assets/..%2fpackage.json",
  "/assets/index.js%00.css",
  "/assets/%00",
  "/assets/..\\..\\etc\\passwd",
  "/assets/..%5c..%5cetc%5cpasswd",
  "//etc/passwd",
  "/./index.html/..",
  "/sessions",
  "/assets/x.js",
];

/** A request with its path exactly as written (fetch would resolve the dots first). */
function raw(base: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((ok, fail) => {
    const req = request({ host: hostname, port, method, path, headers }, (res) => {
      let text = "";
      res.setEncoding("latin1");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => ok({ status: res.statusCode ?? 0, body: text }));
    });
    req.on("error", fail);
    req.end(body);
  });
}

export async function consoleCase(ctx: FuzzContext): Promise<void> {
  const { stack, anomalies, nc } = ctx;
  const auth = { authorization: `Bearer ${stack.token}` };
  let sent = 0;
  const answered = (status: number) => {
    sent += 1;
    countStatus(ctx, status);
    if (status >= 500 && status !== 503) anomalies.add("5xx answers", `console case: ${status}`);
  };

  // The console itself: built (200) or not (503, a page saying so); an asset path it does not have is 404.
  for (const path of ["/", "/index.html"]) {
    const r = await raw(stack.url, "GET", path, {});
    answered(r.status);
    if (r.status !== 200 && r.status !== 503) anomalies.add("malformed requests accepted", `GET ${path}: ${r.status}`);
  }
  for (const path of TRAVERSALS) {
    const r = await raw(stack.url, "GET", path, auth);
    answered(r.status);
    if (r.status !== 404 || /root:x:0|"name": "paddock"/.test(r.body)) anomalies.add("malformed requests accepted", `GET ${excerpt(path)}: ${r.status} ${excerpt(r.body, 80)}`);
  }

  // Foreign origins on every kind of state-changing call: refused, nothing changed.
  await waitFor(() => feedsDrained(nc), 10_000, 200);
  const before = await snapshotState(nc);
  const { running, environmentId, tokenId, secretName } = ctx.fixtures;
  const calls: Array<[string, string, unknown]> = [
    ["POST", "/v1/sessions", { spec: { cmd: ["true"] } }],
    ["POST", `/v1/sessions/${running.id}/suspend`, {}],
    ["DELETE", `/v1/sessions/${running.id}`, undefined],
    ["POST", "/v1/environments", { name: "chaos-foreign" }],
    ["PATCH", `/v1/environments/${environmentId}`, { name: "chaos-foreign" }],
    ["DELETE", `/v1/tokens/${tokenId}`, undefined],
    ["PUT", `/v1/secrets/${secretName}`, { value: "foreign" }],
    ["POST", "/v1/tokens", { label: "foreign" }],
  ];
  for (const origin of ["https://evil.example", "null", `${stack.url}.evil.example`]) {
    for (const [method, path, body] of calls) {
      const r = await raw(stack.url, method, path, { ...auth, origin, "content-type": "application/json" }, body === undefined ? undefined : JSON.stringify(body));
      answered(r.status);
      if (r.status !== 403 || !r.body.includes('"forbidden"')) anomalies.add("malformed requests accepted", `${method} ${path} from ${origin}: ${r.status} ${excerpt(r.body, 80)}`);
    }
  }
  // The gateway's own origin still reads and writes (a read that changes nothing).
  const own = await api(stack.url, stack.token, "GET", "/v1/sessions");
  answered(own.status);
  await waitFor(() => feedsDrained(nc), 10_000, 200);
  for (const c of diffState(before, await snapshotState(nc))) anomalies.add("state changes", `after foreign-origin calls: ${c}`);
  ctx.sent.set("console and origin calls", sent);
  log("bad-input", `console case: ${sent} requests (traversal, foreign origins)`);
}
