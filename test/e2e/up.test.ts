/**
 * The README's first quick-start command: `npm run up` brings the whole
 * system up on this machine and prints how to reach it; Ctrl-C stops it all.
 * (The bootstrap in front of it only installs; here the tools are present.)
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { expect, it } from "vitest";
import { repoRoot, tsxBin } from "@paddock/testing";
import { api, sessionOf, Terminal } from "./helpers.ts";

it("npm run up prints PADDOCK_URL and PADDOCK_TOKEN, serves a session, and stops cleanly on SIGINT", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "paddock-up-"));
  const child = spawn(tsxBin, ["scripts/up.ts", "--http-port", "0", "--data-dir", dataDir], {
    cwd: repoRoot,
    env: { ...process.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const printed: Record<string, string> = {};
  await new Promise<void>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const m = /^(PADDOCK_[A-Z_]+)=(.+)$/.exec(line);
      if (m?.[1] && m[2]) printed[m[1]] = m[2];
      if (printed.PADDOCK_URL && printed.PADDOCK_TOKEN) resolve();
    });
    void exited.then((code) => reject(new Error(`up exited (${code}) before printing its URL`)));
  });
  const url = printed.PADDOCK_URL ?? "";
  const token = printed.PADDOCK_TOKEN ?? "";
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(token).toMatch(/^pdk_dev_[0-9a-f]+$/);

  const created = await api(url, token, "POST", "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo up-works"] } });
  expect(created.status).toBe(201);
  const term = await Terminal.open(url, token, sessionOf(created).id, "since=all");
  await term.closed;
  expect(term.output()).toContain("up-works");
  expect((await api(url, undefined, "GET", "/v1/sessions")).status).toBe(401);

  child.kill("SIGINT");
  expect(await exited).toBe(0);
  rmSync(dataDir, { recursive: true, force: true });
});
