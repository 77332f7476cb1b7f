/**
 * Why an image could not be had. `code` is stable (logs, metrics, facts);
 * `status` is the API error class a caller maps it to; the message is short,
 * names no credential, and is safe to show a client.
 */
export const ImageErrorCode = {
  invalidReference: "invalid_reference",
  notFound: "image_not_found",
  unauthenticated: "registry_unauthenticated",
  forbidden: "registry_forbidden",
  timeout: "registry_timeout",
  unavailable: "registry_unavailable",
  /** The registry or file served bytes that do not match the digest or size it named. */
  digestMismatch: "digest_mismatch",
  tooLarge: "image_too_large",
  unsupported: "image_unsupported",
  noPlatform: "no_matching_platform",
  unpackFailed: "unpack_failed",
  insecureRefused: "insecure_registry_refused",
} as const;
export type ImageErrorCode = (typeof ImageErrorCode)[keyof typeof ImageErrorCode];

export type ImageErrorStatus = "invalid" | "not_found" | "unauthenticated" | "forbidden" | "too_large" | "unavailable";

const STATUS: Record<ImageErrorCode, ImageErrorStatus> = {
  invalid_reference: "invalid",
  image_not_found: "not_found",
  registry_unauthenticated: "unauthenticated",
  registry_forbidden: "forbidden",
  registry_timeout: "unavailable",
  registry_unavailable: "unavailable",
  digest_mismatch: "unavailable",
  image_too_large: "too_large",
  image_unsupported: "invalid",
  no_matching_platform: "not_found",
  unpack_failed: "unavailable",
  insecure_registry_refused: "invalid",
};

export class ImageError extends Error {
  readonly status: ImageErrorStatus;
  constructor(
    readonly code: ImageErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "ImageError";
    this.status = STATUS[code];
  }
}
