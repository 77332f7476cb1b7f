/**
 * A followed NDJSON response (`?follow=true` routes) as a test reads it: the
 * parsed lines as they arrive, and a way to wait for n of them without a
 * clock (each chunk wakes the waiters).
 */
import { request as httpRequest, type IncomingMessage } from "node:http";

export interface Follow<Line> {
  res: IncomingMessage;
  lines: Line[];
  /** Resolves once n lines arrived; rejects if the stream ends first. */
  until(n: number): Promise<void>;
  /** Resolves with the first line (from index `from`) that `pred` accepts. */
  waitFor(pred: (line: Line) => boolean, from?: number): Promise<Line>;
  close(): void;
}

export function followNdjson<Line = unknown>(base: string, path: string, token: string): Promise<Follow<Line>> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
      const lines: Line[] = [];
      const waiters: Array<() => void> = [];
      let buf = "";
      res.setEncoding("utf8");
      const wake = () => {
        for (const w of waiters.splice(0)) w();
      };
      res.on("data", (chunk: string) => {
        buf += chunk;
        let nl: number;
        while ((nl = buf.indexOf("\n")) !== -1) {
          lines.push(JSON.parse(buf.slice(0, nl)) as Line);
          buf = buf.slice(nl + 1);
        }
        wake();
      });
      res.on("close", wake);
      const next = async (n: number) => {
        while (lines.length < n) {
          if (res.destroyed || res.complete) throw new Error(`stream ended with ${String(lines.length)} lines`);
          await new Promise<void>((r) => waiters.push(r));
        }
      };
      resolve({
        res,
        lines,
        until: next,
        waitFor: async (pred, from = 0) => {
          for (let i = from; ; i++) {
            await next(i + 1);
            const line = lines[i] as Line;
            if (pred(line)) return line;
          }
        },
        close: () => req.destroy(),
      });
    });
    req.on("error", reject);
    req.end();
  });
}

/**
 * Opens `path` as a follow, and leaves (destroys the request) while the
 * scheduler's answer to `verb` is held; releases it once the gateway (in this
 * process) has had a few turns of its loop to see the close.
 */
export async function leaveWhileHeld(
  h: { url: string; scheduler: { hold(verb: string): () => void; nextCall(verb: string): Promise<unknown> } },
  verb: string,
  path: string,
  token: string,
): Promise<void> {
  const release = h.scheduler.hold(verb);
  const asked = h.scheduler.nextCall(verb);
  const req = httpRequest(`${h.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
  req.on("error", () => undefined);
  const closed = new Promise((resolve) => req.once("close", resolve));
  req.end();
  await asked;
  req.destroy();
  await closed;
  // The gateway runs in this process: a few turns of the loop and it has seen the socket close.
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  release();
}
