// The OCI distribution API, read side: manifests and blobs over HTTP(S), with
// bearer-token challenges, plain HTTP only for registries listed as insecure,
// a deadline for response headers and an idle deadline between body chunks.
import { MANIFEST_ACCEPT, sha256Digest } from "@paddock/oci";
import { ImageError, ImageErrorCode } from "./errors.ts";
import type { ImageReference } from "./reference.ts";

export interface RegistryCredentials {
  username: string;
  password: string;
}

export interface RegistryClientOptions {
  /** host[:port] served over plain HTTP (loopback test registries, a local mirror). */
  insecureRegistries: readonly string[];
  /** From request to response headers. */
  requestTimeoutMs: number;
  /** Longest wait for the next body chunk. */
  idleTimeoutMs: number;
  credentials?: (registry: string) => RegistryCredentials | undefined;
}

export interface FetchedManifest {
  bytes: Buffer;
  mediaType: string;
  /** sha256 of the bytes as received. */
  digest: string;
}

/** Manifests larger than this are refused (real ones are a few KiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

class IdleTimeout extends Error {}

interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

function parseChallenge(header: string | null): Challenge | undefined {
  if (!header) return undefined;
  const m = /^(\w+)\s+(.*)$/.exec(header.trim());
  if (!m) return undefined;
  const params: Record<string, string> = {};
  for (const p of (m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) params[(p[1] ?? "").toLowerCase()] = p[2] ?? "";
  return { scheme: (m[1] ?? "").toLowerCase(), params };
}

export class RegistryClient {
  /** Authorization per registry/repository, learned from a challenge; reused by later requests. */
  private readonly auth = new Map<string, string>();

  constructor(private readonly opts: RegistryClientOptions) {}

  private base(ref: ImageReference): string {
    return `${this.opts.insecureRegistries.includes(ref.registry) ? "http" : "https"}://${ref.apiHost}`;
  }

  async manifest(ref: ImageReference, reference: string): Promise<FetchedManifest> {
    const res = await this.get(ref, `/v2/${ref.repository}/manifests/${reference}`, { accept: MANIFEST_ACCEPT });
    const bytes = await this.readAll(res, MAX_MANIFEST_BYTES, ref);
    const mediaType = (res.headers.get("content-type") ?? "").split(";")[0]?.trim() ?? "";
    return { bytes, mediaType, digest: sha256Digest(bytes) };
  }

  /** The blob's body as chunks; the caller verifies them (writeVerified). */
  async blob(ref: ImageReference, digest: string): Promise<AsyncIterable<Uint8Array>> {
    const ac = new AbortController();
    const res = await this.get(ref, `/v2/${ref.repository}/blobs/${digest}`, {}, ac);
    return this.chunks(res, ac, ref);
  }

  private async get(ref: ImageReference, path: string, headers: Record<string, string>, ac = new AbortController()): Promise<Response> {
    const key = `${ref.registry}/${ref.repository}`;
    let res = await this.send(ref, path, headers, this.auth.get(key), ac);
    if (res.status === 401) {
      const authorization = await this.authorize(ref, parseChallenge(res.headers.get("www-authenticate")));
      await res.body?.cancel();
      if (authorization) {
        this.auth.set(key, authorization);
        res = await this.send(ref, path, headers, authorization, ac);
      }
    }
    if (res.ok) return res;
    await res.body?.cancel();
    throw this.statusError(ref, res.status);
  }

  private async send(ref: ImageReference, path: string, headers: Record<string, string>, authorization: string | undefined, ac: AbortController): Promise<Response> {
    const timer = setTimeout(() => ac.abort(new IdleTimeout()), this.opts.requestTimeoutMs);
    try {
      // Redirects (blob storage) are followed by fetch, which drops Authorization across origins.
      return await fetch(`${this.base(ref)}${path}`, {
        headers: { ...headers, ...(authorization ? { authorization } : {}) },
        signal: ac.signal,
      });
    } catch (err) {
      throw this.networkError(ref, ac, err);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Answers a Bearer challenge with a token from its realm, or a Basic one with the configured credentials. */
  private async authorize(ref: ImageReference, challenge: Challenge | undefined): Promise<string | undefined> {
    const creds = this.opts.credentials?.(ref.registry);
    const basic = creds ? `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString("base64")}` : undefined;
    if (challenge?.scheme === "basic") return basic;
    if (challenge?.scheme !== "bearer" || !challenge.params.realm) return undefined;
    let realm: URL;
    try {
      realm = new URL(challenge.params.realm);
    } catch (err) {
      throw new ImageError(ImageErrorCode.unauthenticated, `${ref.registry} sent an unusable token realm`, { cause: err });
    }
    // Credentials travel in clear only to a realm of a registry the config already trusts over HTTP.
    if (realm.protocol !== "https:" && !(realm.protocol === "http:" && this.opts.insecureRegistries.includes(ref.registry))) {
      throw new ImageError(ImageErrorCode.insecureRefused, `${ref.registry} sent a token realm that is not https`);
    }
    if (challenge.params.service) realm.searchParams.set("service", challenge.params.service);
    realm.searchParams.set("scope", challenge.params.scope ?? `repository:${ref.repository}:pull`);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new IdleTimeout()), this.opts.requestTimeoutMs);
    let res: Response;
    try {
      res = await fetch(realm, { headers: basic ? { authorization: basic } : {}, signal: ac.signal });
    } catch (err) {
      throw this.networkError(ref, ac, err);
    } finally {
      clearTimeout(timer);
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw this.statusError(ref, res.status === 404 ? 401 : res.status);
    }
    const body = JSON.parse((await this.readAll(res, 64 * 1024, ref)).toString("utf8")) as { token?: unknown; access_token?: unknown };
    const token = typeof body.token === "string" ? body.token : body.access_token;
    if (typeof token !== "string" || token === "") throw new ImageError(ImageErrorCode.unauthenticated, `${ref.registry} token endpoint gave no token`);
    return `Bearer ${token}`;
  }

  private async readAll(res: Response, max: number, ref: ImageReference): Promise<Buffer> {
    const declared = Number(res.headers.get("content-length") ?? "0");
    if (declared > max) throw new ImageError(ImageErrorCode.tooLarge, `${ref.registry} sent a manifest over ${max} bytes`);
    const parts: Uint8Array[] = [];
    let size = 0;
    for await (const chunk of this.chunks(res, new AbortController(), ref)) {
      size += chunk.length;
      if (size > max) throw new ImageError(ImageErrorCode.tooLarge, `${ref.registry} sent a manifest over ${max} bytes`);
      parts.push(chunk);
    }
    return Buffer.concat(parts);
  }

  private async *chunks(res: Response, ac: AbortController, ref: ImageReference): AsyncGenerator<Uint8Array> {
    if (!res.body) return;
    const reader = res.body.getReader();
    const onAbort = () => void reader.cancel(ac.signal.reason).catch(() => undefined);
    ac.signal.addEventListener("abort", onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    try {
      for (;;) {
        timer = setTimeout(() => ac.abort(new IdleTimeout()), this.opts.idleTimeoutMs);
        let next: Awaited<ReturnType<typeof reader.read>>;
        try {
          next = await reader.read();
        } catch (err) {
          throw this.networkError(ref, ac, err);
        }
        clearTimeout(timer);
        if (ac.signal.aborted) throw this.networkError(ref, ac, ac.signal.reason);
        if (next.done) return;
        yield next.value;
      }
    } finally {
      clearTimeout(timer);
      ac.signal.removeEventListener("abort", onAbort);
      // The consumer stopped early (a refused blob): close the connection rather than drain it.
      await reader.cancel().catch(() => undefined);
    }
  }

  private networkError(ref: ImageReference, ac: AbortController, err: unknown): ImageError {
    if (err instanceof ImageError) return err;
    if (ac.signal.reason instanceof IdleTimeout) return new ImageError(ImageErrorCode.timeout, `${ref.registry} did not answer in time`, { cause: err });
    return new ImageError(ImageErrorCode.unavailable, `${ref.registry} could not be reached`, { cause: err });
  }

  private statusError(ref: ImageReference, status: number): ImageError {
    const name = `${ref.registry}/${ref.repository}`;
    if (status === 401) return new ImageError(ImageErrorCode.unauthenticated, `${name}: registry refused the credentials`);
    if (status === 403) return new ImageError(ImageErrorCode.forbidden, `${name}: registry forbids the pull`);
    if (status === 404) return new ImageError(ImageErrorCode.notFound, `${name}: not found in the registry`);
    return new ImageError(ImageErrorCode.unavailable, `${name}: registry answered HTTP ${status}`);
  }
}
