import { z } from "zod";

/** The public error vocabulary and the HTTP status each one maps to. */
export const ErrorCode = {
  invalid: "invalid",
  unauthenticated: "unauthenticated",
  forbidden: "forbidden",
  not_found: "not_found",
  conflict: "conflict",
  too_large: "too_large",
  rate_limited: "rate_limited",
  unavailable: "unavailable",
  internal: "internal",
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export const httpStatusOf: Record<ErrorCode, number> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  rate_limited: 429,
  unavailable: 503,
  internal: 500,
};

export const ErrorBody = z
  .object({
    code: z.enum(ErrorCode),
    message: z.string(),
  })
  .strict();
export type ErrorBody = z.infer<typeof ErrorBody>;

/** What any PaddockError may carry besides its code and message. */
export interface PaddockErrorOptions {
  /** The error this one explains (ES2022 `cause`): kept for logs, never sent to a client. */
  cause?: unknown;
}

/** A retryable error may also say when to try again. */
export interface RetryableErrorOptions extends PaddockErrorOptions {
  /** How long to wait before the next try; without it the caller backs off on its own. */
  retryAfterMs?: number;
}

/**
 * An error with a stable code. Whether a consumer retries is decided by the
 * class: a PaddockError is terminal (the same input fails the same way); an
 * UnavailableError is retryable and may say when (`retryAfterMs`).
 */
export class PaddockError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: PaddockErrorOptions,
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PaddockError";
  }

  get retryable(): boolean {
    return false;
  }

  toBody(): ErrorBody {
    return { code: this.code, message: this.message };
  }
}

export class InvalidError extends PaddockError {
  constructor(message: string, options?: PaddockErrorOptions) {
    super("invalid", message, options);
  }
}

export class NotFoundError extends PaddockError {
  constructor(what = "resource", options?: PaddockErrorOptions) {
    super("not_found", `${what} not found`, options);
  }
}

export class ConflictError extends PaddockError {
  constructor(message: string, options?: PaddockErrorOptions) {
    super("conflict", message, options);
  }
}

export class ForbiddenError extends PaddockError {
  constructor(message = "not allowed", options?: PaddockErrorOptions) {
    super("forbidden", message, options);
  }
}

export class UnauthenticatedError extends PaddockError {
  constructor(message = "missing or invalid token", options?: PaddockErrorOptions) {
    super("unauthenticated", message, options);
  }
}

export class TooLargeError extends PaddockError {
  constructor(message: string, options?: PaddockErrorOptions) {
    super("too_large", message, options);
  }
}

/** Retryable: a dependency is down or a race was lost; the caller may try again (after `retryAfterMs`, if given). */
export class UnavailableError extends PaddockError {
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options?: RetryableErrorOptions) {
    super("unavailable", message, options);
    this.retryAfterMs = options?.retryAfterMs;
  }

  override get retryable(): boolean {
    return true;
  }
}

export function errorFromBody(body: ErrorBody): PaddockError {
  return body.code === "unavailable" ? new UnavailableError(body.message) : new PaddockError(body.code, body.message);
}

/** Renders zod issues as one line a client can act on, without echoing values. */
export function describeZodError(err: z.ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`)
    .join("; ");
}
