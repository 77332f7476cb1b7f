/**
 * The bad-input scenario's webhook: a receiver on loopback that checks every
 * delivery with the Standard Webhooks library, so a run also shows that
 * deliveries went on (signed) while the API and the bus were fuzzed.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";

export interface WebhookReceiver {
  url: string;
  /** Deliveries received, and how many of them failed verification. */
  readonly received: number;
  readonly unverified: number;
  /** Verifies what comes from now on with the webhook's secret (`whsec_…`). */
  useSecret(secret: string): void;
  close(): Promise<void>;
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  let verifier: Webhook | undefined;
  let received = 0;
  let unverified = 0;
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString("utf8")));
    req.on("end", () => {
      received += 1;
      try {
        if (!verifier) throw new Error("no secret yet");
        verifier.verify(body, req.headers as Record<string, string>);
      } catch {
        unverified += 1;
      }
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/chaos`,
    get received() {
      return received;
    },
    get unverified() {
      return unverified;
    },
    useSecret: (secret) => (verifier = new Webhook(secret.replace(/^whsec_/, ""))),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
