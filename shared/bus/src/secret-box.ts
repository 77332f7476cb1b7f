/**
 * Secret values at rest (KV `secrets`): an AES-256-GCM envelope when a key is
 * configured (PADDOCK_SECRETS_KEY, 32 bytes as 64 hex chars or base64), else
 * the value as is in a plain envelope (development only: anyone who can read
 * the bucket's stream then reads the value).
 *
 * The KV key (`<workspace>.<name>`) is bound as additional authenticated data,
 * so a ciphertext copied to another workspace's key fails to open. Errors
 * thrown here never carry the value or the key.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { z } from "zod";

const Envelope = z.discriminatedUnion("alg", [
  z.object({ v: z.literal(1), alg: z.literal("aes-256-gcm"), iv: z.string(), tag: z.string(), ct: z.string() }).strict(),
  z.object({ v: z.literal(1), alg: z.literal("none"), value: z.string() }).strict(),
]);

export class SecretBoxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SecretBoxError";
  }
}

/** Parses PADDOCK_SECRETS_KEY: 64 hex chars or base64 of exactly 32 bytes; undefined when unset or empty. */
export function parseSecretsKey(raw: string | undefined): Buffer | undefined {
  if (raw === undefined || raw === "") return undefined;
  const key = /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, "hex") : Buffer.from(raw, "base64");
  if (key.length !== 32) throw new SecretBoxError("PADDOCK_SECRETS_KEY must be 32 bytes (64 hex chars or base64)");
  return key;
}

/** A zod schema for the key setting (the message never quotes the input). */
export const SecretsKeySetting = z
  .string()
  .optional()
  .refine((v) => {
    try {
      parseSecretsKey(v);
      return true;
    } catch {
      return false;
    }
  }, "must be 32 bytes (64 hex chars or base64)")
  .transform((v) => parseSecretsKey(v));

export class SecretBox {
  constructor(private readonly key: Buffer | undefined) {}

  get encrypts(): boolean {
    return this.key !== undefined;
  }

  seal(kvKey: string, value: string): Uint8Array {
    if (!this.key) return Buffer.from(JSON.stringify({ v: 1, alg: "none", value }));
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(kvKey, "utf8"));
    const ct = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
    const env = { v: 1, alg: "aes-256-gcm", iv: iv.toString("base64"), tag: cipher.getAuthTag().toString("base64"), ct: ct.toString("base64") };
    return Buffer.from(JSON.stringify(env));
  }

  /** The value; SecretBoxError (no detail) when the record is malformed, tampered, or sealed differently than configured. */
  open(kvKey: string, bytes: Uint8Array): string {
    let env: z.infer<typeof Envelope>;
    try {
      env = Envelope.parse(JSON.parse(Buffer.from(bytes).toString("utf8")));
    } catch {
      throw new SecretBoxError("malformed secret record");
    }
    if (env.alg === "none") {
      // A configured key never accepts plaintext: a writer without the key cannot plant values.
      if (this.key) throw new SecretBoxError("secret record is not encrypted");
      return env.value;
    }
    if (!this.key) throw new SecretBoxError("secret record is encrypted and no key is configured");
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, Buffer.from(env.iv, "base64"));
      decipher.setAAD(Buffer.from(kvKey, "utf8"));
      decipher.setAuthTag(Buffer.from(env.tag, "base64"));
      return Buffer.concat([decipher.update(Buffer.from(env.ct, "base64")), decipher.final()]).toString("utf8");
    } catch {
      throw new SecretBoxError("secret record could not be decrypted");
    }
  }
}
