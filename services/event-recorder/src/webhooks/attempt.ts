import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { guardedLookup, isPublicAddress } from "@paddock/service";
import { signDelivery } from "./sign.ts";

/** What one attempt came to: a 2xx answer is delivered; anything else failed, with why (never the receiver's body). */
export interface AttemptResult {
  delivered: boolean;
  status?: number;
  error?: string;
  durationMs: number;
}

export interface AttemptOptions {
  url: string;
  secret: string;
  /** The audit event's id: `webhook-id`, what a receiver deduplicates on. */
  id: string;
  body: string;
  now: () => number;
  timeoutMs: number;
  allowPrivate: boolean;
}

/** Bytes of an answer read before it is dropped (its status is what counts). */
const ANSWER_READ_BYTES = 64 * 1024;

/**
 * POSTs one signed delivery: the connection goes only to an address the
 * outbound guard allows (checked on the address connected to), no redirect is
 * followed, and the whole attempt is bounded by timeoutMs.
 */
export function attemptDelivery(o: AttemptOptions): Promise<AttemptResult> {
  const started = o.now();
  const timestamp = Math.floor(started / 1000);
  const url = new URL(o.url);
  const send = url.protocol === "https:" ? httpsRequest : httpRequest;
  // An address literal is never looked up: judged here (a name is judged by guardedLookup on what it resolves to).
  const literal = url.hostname.replace(/^\[|\]$/g, "");
  if (!o.allowPrivate && isIP(literal) !== 0 && !isPublicAddress(literal)) return Promise.resolve({ delivered: false, error: "EPRIVATE: the address is private, loopback or link-local", durationMs: 0 });
  return new Promise<AttemptResult>((resolve) => {
    let settled = false;
    const done = (r: Omit<AttemptResult, "durationMs">) => {
      if (settled) return;
      settled = true;
      resolve({ ...r, durationMs: Math.max(0, Math.round(o.now() - started)) });
    };
    const req = send(
      url,
      {
        method: "POST",
        lookup: guardedLookup(o.allowPrivate) as never,
        timeout: o.timeoutMs,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(o.body),
          "user-agent": "Paddock-Webhooks/1",
          "webhook-id": o.id,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": signDelivery(o.secret, o.id, timestamp, o.body),
        },
      },
      (res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        let read = 0;
        res.on("data", (chunk: Buffer) => {
          read += chunk.byteLength;
          if (read > ANSWER_READ_BYTES) res.destroy();
        });
        res.once("close", () => done(status >= 200 && status < 300 ? { delivered: true, status } : { delivered: false, status, error: `answered ${status}` }));
      },
    );
    const overall = setTimeout(() => req.destroy(new Error(`no answer within ${o.timeoutMs} ms`)), o.timeoutMs);
    overall.unref();
    req.once("timeout", () => req.destroy(new Error(`no answer within ${o.timeoutMs} ms`)));
    req.once("error", (err: NodeJS.ErrnoException) => done({ delivered: false, error: (err.code ? `${err.code}: ` : "") + err.message.slice(0, 200) }));
    req.once("close", () => clearTimeout(overall));
    req.end(o.body);
  });
}
