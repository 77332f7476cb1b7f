/**
 * The web console (issue 27's goals), in Debian's Chromium against a real
 * stack, each beside a baseline measured in the same run: the compressed
 * JavaScript of a first load (every script the page fetched, gzip -9) beside
 * xterm.js alone compressed the same way; and a terminal's open to its first
 * frame on screen (the console's user-timing marks: mounted → first output
 * drawn) beside a raw WebSocket attach from Node to the same session (open
 * → first output frame).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { connect } from "@nats-io/transport-node";
import { repoRoot, startStack } from "@paddock/testing";
import { launchBrowser } from "../../test/e2e/browser.ts";
import { stopStackKeepingData } from "./leftovers.ts";
import { figure, percentile, type Figure } from "./stats.ts";
import WebSocket from "ws";
import { post, runningWatch } from "./terminal.ts";

const KB = 1024;

/** The page's location, as the functions Playwright runs in the page see it (this program has no DOM types). */
interface Nav {
  location: { hash: string };
}

export async function consoleBench(opts: { samples: number }): Promise<Figure[]> {
  const stack = await startStack({ validateOutgoing: false });
  const nc = await connect({ servers: stack.nats.url });
  const watch = await runningWatch(nc);
  const browser = await launchBrowser();
  try {
    const s = await post(stack, "/v1/sessions", { spec: { cmd: ["sh", "-c", "echo console-bench-ready; exec cat"] } });
    await watch.untilRunning(s.id);
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 860 } })).newPage();
    const scripts = new Map<string, Buffer>();
    page.on("response", (r) => {
      if (r.request().resourceType() === "script") void r.body().then((b) => scripts.set(r.url(), b), () => undefined);
    });
    await page.goto(`${stack.url}/#token=${encodeURIComponent(stack.token)}&/sessions`);
    await page.getByTestId("sessions-table").waitFor();
    const firstLoadKB = [...scripts.values()].reduce((sum, b) => sum + gzipSync(b, { level: 9 }).length, 0) / KB;
    // The console's own copy, by path (tsx maps the bare name to the services' typings stand-in).
    const xtermKB = gzipSync(readFileSync(join(repoRoot, "console/node_modules/@xterm/xterm/lib/xterm.mjs")), { level: 9 }).length / KB;

    const open: number[] = [];
    for (let i = 0; i < opts.samples + 2; i++) {
      await page.evaluate(() => performance.clearMarks());
      await page.evaluate((id) => ((globalThis as unknown as Nav).location.hash = `#/sessions/${id}?mode=viewer`), s.id);
      const ms = await page.waitForFunction(() => {
        const [mount] = performance.getEntriesByName("paddock:terminal:mount");
        const [frame] = performance.getEntriesByName("paddock:terminal:first-frame");
        return mount && frame ? frame.startTime - mount.startTime : undefined;
      });
      // Two warm-ups: the first open also loads fonts and builds the page's caches.
      if (i >= 2) open.push((await ms.jsonValue()) as number);
      await page.evaluate(() => ((globalThis as unknown as Nav).location.hash = "#/sessions"));
      await page.getByTestId("sessions-table").waitFor();
    }
    const raw: number[] = [];
    for (let i = 0; i < opts.samples + 2; i++) {
      const t0 = performance.now();
      // Listening from the start: the first frame may arrive with the upgrade's answer, before "open" is seen.
      const ws = new WebSocket(`${stack.url.replace(/^http/, "ws")}/v1/sessions/${s.id}/terminal?since=screen&mode=viewer`, { headers: { authorization: `Bearer ${stack.token}` } });
      await new Promise<void>((resolve, reject) => {
        ws.on("message", (_data, binary) => binary && resolve());
        ws.once("error", reject);
        ws.once("close", (code) => reject(new Error(`the raw attach closed (${code}) before its first frame`)));
      });
      if (i >= 2) raw.push(performance.now() - t0);
      ws.close();
    }
    const p50 = percentile(open, 50);
    return [
      figure({ bench: "console", metric: "first load: compressed JavaScript", value: firstLoadKB, unit: "KB", baseline: { name: "xterm.js alone", value: xtermKB }, goal: "≤ 300 KB", met: firstLoadKB <= 300 }),
      figure({ bench: "console", metric: "terminal open to first frame p50", value: p50, unit: "ms", baseline: { name: "raw WebSocket attach p50", value: percentile(raw, 50) }, goal: "≤ 100 ms", met: p50 <= 100 }),
    ];
  } finally {
    await browser.close();
    watch.stop();
    await nc.drain();
    await stopStackKeepingData(stack);
  }
}
