import { afterEach, describe, expect, it } from "vitest";
import type { Logger } from "@paddock/logging";
import { runMain } from "./index.ts";

/** The messages a service logged at info, in order. */
function recordingLogger(): { log: Logger; messages: string[]; next: (msg: string) => Promise<void> } {
  const messages: string[] = [];
  const waiters: Array<{ msg: string; resolve: () => void }> = [];
  const info = (objOrMsg: unknown, msg?: string) => {
    const text = typeof objOrMsg === "string" ? objOrMsg : (msg ?? "");
    messages.push(text);
    for (const w of waiters.filter((x) => x.msg === text)) w.resolve();
  };
  const log = { info, warn: info, error: info, fatal: info, debug: info } as unknown as Logger;
  const next = (msg: string) => new Promise<void>((resolve) => (messages.includes(msg) ? resolve() : waiters.push({ msg, resolve })));
  return { log, messages, next };
}

const signals = ["SIGTERM", "SIGINT"] as const;
const before = Object.fromEntries(signals.map((s) => [s, process.listeners(s)]));
afterEach(() => {
  // runMain installs its shutdown handlers; leave the test process as it was.
  for (const s of signals) for (const l of process.listeners(s)) if (!before[s]?.includes(l)) process.off(s, l);
});

describe("runMain", () => {
  it("logs ready only once the service's settle step resolved", async () => {
    const { log, messages, next } = recordingLogger();
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => (settle = resolve));
    let started!: () => void;
    const startCalled = new Promise<void>((resolve) => (started = resolve));
    runMain(log, () => {
      started();
      return Promise.resolve({ stop: () => Promise.resolve(), settle: () => settled, readyInfo: { port: 1 } });
    });
    await startCalled;
    // Several turns of the event loop: nothing announces readiness while the settle step is pending.
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(messages).not.toContain("ready");
    settle();
    await next("ready");
    expect(messages).toContain("ready");
  });
});
