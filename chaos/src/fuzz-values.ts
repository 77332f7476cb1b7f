/** Generators of malformed values for the bad-input scenario; every choice comes from the seeded PRNG. */
import type { z } from "zod";
import { Id, ImageRef, MAX_JSON_DEPTH, SecretName } from "@paddock/contracts";
import type { Prng } from "./prng.ts";

const NASTY_STRINGS = [
  "",
  " ",
  "..",
  "../../etc/passwd",
  "/",
  "%00",
  "\u0000",
  "\u0000abc",
  "a.b",
  "a*b",
  "a>b",
  "a b",
  "\ud800",
  "\udfff\ud800",
  "é",
  "😀",
  "\u202e",
  "__proto__",
  "constructor",
  "prototype",
  "null",
  "true",
  "NaN",
  "-1",
  "1e309",
  "0x10",
  "${jndi:ldap://x}",
  "<script>alert(1)</script>",
  "'; DROP TABLE sessions; --",
  "\r\nX-Injected: 1",
  "paddock.>",
  "*",
  ">",
  "$KV.sessions.>",
];

/** A string that is likely to break a parser or a validator. */
export function nastyString(p: Prng): string {
  switch (p.int(0, 6)) {
    case 0:
      return p.pick(NASTY_STRINGS);
    case 1:
      return p.string(p.int(1, 40), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._-/%*>$");
    case 2:
      return "x".repeat(p.pick([64, 65, 129, 257, 513, 4097, 40_000]));
    case 3:
      return String.fromCharCode(...Array.from({ length: p.int(1, 20) }, () => p.int(0, 0x2fff)));
    case 4:
      return p.bytes(p.int(1, 30)).toString("latin1");
    case 5:
      return p.pick(NASTY_STRINGS) + p.string(p.int(0, 8));
    default:
      return p.string(p.int(0, 12));
  }
}

/** A string that fails the Id schema (1-64 of [A-Za-z0-9_-]). */
export function badId(p: Prng): string {
  switch (p.int(0, 4)) {
    case 0:
      // Past both an id (64) and a secret name (128).
      return "a".repeat(p.int(129, 300));
    case 1:
      return `${p.string(p.int(0, 10))}${p.pick([".", "*", ">", " ", "%", "é", "\u0000", "!", "~", "'", ":"])}${p.string(p.int(0, 10))}`;
    case 2:
      return p.pick(["..", ".", "%2e%2e", "%2F", "%00", "%", "%zz", "%ff%fe"]);
    default:
      return invalidated(`${p.string(p.int(1, 8))}${nastyString(p)}`);
  }
}

/**
 * The string itself when it fails both the Id and the secret-name schema (a
 * route parameter is one or the other), else with a dot appended (neither
 * ever holds one). Found by a full chaos run: "xpv6" + 64 × "x" is too long
 * for an id but a fine secret name, and `PUT /v1/secrets/:name` rightly took it.
 */
export function invalidated(s: string): string {
  return Id.safeParse(s).success || SecretName.safeParse(s).success ? `${s}.` : s;
}

export function randomNumber(p: Prng): number {
  return p.pick([0, -1, 1, 0.5, -0.5, 1e308, -1e308, 2 ** 53 + 1, -(2 ** 53), 4294967296, 1001, 65536, p.int(-1_000_000, 1_000_000), p.next()]);
}

/** Any JSON value, nested up to depth. */
export function randomJson(p: Prng, depth = 3): unknown {
  const k = p.int(0, depth > 0 ? 7 : 4);
  switch (k) {
    case 0:
      return null;
    case 1:
      return p.bool();
    case 2:
      return randomNumber(p);
    case 3:
    case 4:
      return nastyString(p);
    case 5:
      return Array.from({ length: p.int(0, 4) }, () => randomJson(p, depth - 1));
    default: {
      const o: Record<string, unknown> = {};
      for (let i = p.int(0, 4); i > 0; i--) o[p.bool(0.3) ? p.pick(NASTY_STRINGS) : p.string(p.int(1, 8))] = randomJson(p, depth - 1);
      return o;
    }
  }
}

/** A mutation of a valid sample: a field dropped, retyped, added (strict schemas refuse unknown fields), or the whole body replaced. */
export function mutate(p: Prng, sample: unknown, depth = 0): unknown {
  if (sample === null || typeof sample !== "object" || depth > 3 || p.bool(0.15)) return randomJson(p);
  if (Array.isArray(sample)) {
    const copy = [...(sample as unknown[])];
    if (copy.length > 0 && p.bool(0.5)) copy[p.int(0, copy.length - 1)] = mutate(p, copy[0], depth + 1);
    else copy.push(randomJson(p, 1));
    return copy;
  }
  const copy: Record<string, unknown> = { ...(sample as Record<string, unknown>) };
  const keys = Object.keys(copy);
  switch (p.int(0, 3)) {
    case 0:
      if (keys.length > 0) delete copy[p.pick(keys)];
      break;
    case 1:
      copy[p.bool(0.3) ? p.pick(["__proto__", "constructor", "prototype"]) : p.string(p.int(1, 10))] = randomJson(p, 2);
      break;
    default: {
      if (keys.length === 0) return randomJson(p);
      const key = p.pick(keys);
      copy[key] = mutate(p, copy[key], depth + 1);
    }
  }
  return copy;
}

/** Body text that is not JSON at all, or is JSON only on the surface. */
export function brokenJsonText(p: Prng, sample: unknown): string {
  const text = JSON.stringify(sample) ?? "{}";
  switch (p.int(0, 7)) {
    case 0:
      return text.slice(0, p.int(0, Math.max(0, text.length - 1)));
    case 1:
      return `${text}${p.pick(["}", "]", ",", "garbage", "\u0000", " {}"])}`;
    case 2:
      return text.replace(/"/g, "'");
    case 3:
      return p.pick(["NaN", "undefined", "{a:1}", "[1,]", "{\"a\":1,}", "\ufeff{}", "01", "{\"a\":\"\\x41\"}", "{\"a\":\"\\ud800\"}"]);
    case 4:
      return "[".repeat(p.pick([1000, 20_000])) + "]".repeat(p.bool() ? 1000 : 0);
    case 5:
      return `{"a":${"{\"a\":".repeat(5_000)}1${"}".repeat(5_000)}}`;
    case 6:
      return p.bytes(p.int(1, 200)).toString("latin1");
    default:
      return "";
  }
}

/** Body text the schema refuses: never empty (an empty body reads as `{}` on routes whose body is optional). */
export function refusedText(p: Prng, schema: z.ZodType, sample: unknown): string {
  for (let i = 0; i < 20; i++) {
    const text = brokenJsonText(p, sample);
    if (text.trim() === "") continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return text;
    }
    if (!schema.safeParse(parsed).success) return text;
  }
  return "{";
}

/**
 * A JSON value the schema refuses, mutated from a valid sample (retries until
 * refused; falls back to a non-object). Judged on the value as it travels —
 * after a JSON round trip, which drops what JSON cannot carry (a `__proto__`
 * assignment, for one).
 */
export function refusedBy(p: Prng, schema: z.ZodType, sample: unknown): unknown {
  for (let i = 0; i < 20; i++) {
    const text = JSON.stringify(mutate(p, sample));
    if (text === undefined) continue;
    const wire = JSON.parse(text) as unknown;
    if (!schema.safeParse(wire).success) return wire;
  }
  return p.pick([[], "x", 1, null, true]);
}

/** encodeURIComponent that never throws: lone surrogates become U+FFFD first. */
export function encode(s: string): string {
  return encodeURIComponent(Buffer.from(s, "utf8").toString("utf8"));
}

/** A bad id to put into a path unencoded: printable ASCII, and still not an id once the server percent-decodes it. */
export function rawBadSegment(s: string): string {
  const raw = s.replace(/[^\x21-\x7e]/g, "_").replace(/[/?#]/g, ".");
  let decoded = raw;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    // stays raw: the server keeps an undecodable segment as is
  }
  return Id.safeParse(decoded).success ? `${raw}.` : raw;
}

/**
 * A valid body whose strings reach the OS (command arguments, scripts, image,
 * hosts, paths) made invalid the way exec would not notice: a NUL put into
 * one of its strings (exec would cut it there), or, where the body has a
 * connector (an opaque value), that value nested past MAX_JSON_DEPTH (once a
 * 503: encoding it for the bus ran out of stack).
 */
export function nulOrDeepBody(p: Prng, sample: unknown): string {
  const hasConnector = typeof sample === "object" && sample !== null && "connectors" in sample;
  if (hasConnector && p.bool(0.3)) {
    const depth = p.pick([MAX_JSON_DEPTH - 2, 1000, 100_000]);
    return JSON.stringify({ ...sample, connectors: [{ type: "t", raw: "DEEP" }] }).replace('"DEEP"', `${"[".repeat(depth)}${"]".repeat(depth)}`);
  }
  const leaves: Array<(v: string) => void> = [];
  const copy = JSON.parse(JSON.stringify(sample)) as unknown;
  const walk = (v: unknown) => {
    if (v === null || typeof v !== "object") return;
    for (const [k, child] of Object.entries(v)) {
      if (typeof child === "string") leaves.push((s) => ((v as Record<string, unknown>)[k] = s));
      else walk(child);
    }
  };
  walk(copy);
  const set = p.pick(leaves);
  const base = p.string(p.int(1, 8));
  const at = p.int(0, base.length);
  set(`${base.slice(0, at)}\u0000${base.slice(at)}`);
  return JSON.stringify(copy);
}

/**
 * An image reference the contract's grammar (ImageRef) refuses the way a user
 * gets one wrong: upper case, a bad tag or digest, a bad host or port, a name
 * or reference past its bound. Its value reaches a registry (and the runner's
 * cache paths) only if the API let it through.
 */
export function badImageRef(p: Prng): string {
  const name = p.pick(["paddock/busybox", "debian", "reg.example.com:5000/a/b"]);
  const candidates = [
    name.toUpperCase(),
    `${name}:${p.pick(["-tag", ".tag", "a b", "t".repeat(129), "", "ta/g"])}`,
    `${name}@${p.pick(["sha256:abc", `sha256:${"A".repeat(64)}`, `md5:${"a".repeat(32)}`, `sha512:${"a".repeat(128)}`, "", "sha256:"])}`,
    `${p.pick(["host:99999", "-host.example", "ho_st.example:1", "host.example:"])}/name`,
    `${"a/".repeat(p.int(128, 200))}b`,
    `${name}:${"t".repeat(p.int(500, 600))}`,
    `${name}/${p.pick(["", "..", "a..b", "a__-b", "_a", "a-"])}`,
    `${name}${p.pick(["\t", " ", "\n"])}`,
  ];
  for (let i = 0; i < 10; i++) {
    const ref = p.pick(candidates);
    if (!ImageRef.safeParse(ref).success) return ref;
  }
  return "UPPER/Case";
}

/** A valid body with an `image` (top level, or its spec's) made a reference the API must refuse. */
export function badImageBody(p: Prng, sample: unknown): string {
  const copy = JSON.parse(JSON.stringify(sample)) as { image?: unknown; spec?: { image?: unknown } };
  if (copy.spec && typeof copy.spec === "object") copy.spec.image = badImageRef(p);
  else copy.image = badImageRef(p);
  return JSON.stringify(copy);
}
