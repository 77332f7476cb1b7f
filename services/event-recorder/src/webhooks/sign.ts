import { createHmac } from "node:crypto";

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): the secret is
 * `whsec_` + base64 of the key; the signed content is
 * `<webhook-id>.<webhook-timestamp>.<body>`; the signature header is
 * `v1,<base64 HMAC-SHA256>` (space-separated when several keys sign).
 */
export function signDelivery(secret: string, id: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  return `v1,${createHmac("sha256", key).update(`${id}.${timestampSeconds}.${body}`).digest("base64")}`;
}
