/**
 * Errors of the API as classes by their stable code: `catch (e) { if (e
 * instanceof NotFound) … }`. Each says whether trying again may help
 * (`retryable`) and, when the gateway said, after how long (`retryAfterMs`).
 */
import { ErrorCode } from "@paddock/contracts";

export class PaddockApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** The HTTP status (0: no answer at all). */
    readonly status: number,
    options?: { cause?: unknown; retryAfterMs?: number | undefined },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.retryAfterMs = options?.retryAfterMs;
  }

  readonly retryAfterMs: number | undefined;

  /** Whether the same call may succeed later: the gateway or what it needs was unavailable, or the caller went too fast. */
  get retryable(): boolean {
    return this.code === ErrorCode.unavailable || this.code === ErrorCode.rate_limited;
  }
}

export class Invalid extends PaddockApiError {}
export class Unauthenticated extends PaddockApiError {}
export class Forbidden extends PaddockApiError {}
export class NotFound extends PaddockApiError {}
export class Conflict extends PaddockApiError {}
export class TooLarge extends PaddockApiError {}
export class RateLimited extends PaddockApiError {}
export class Unavailable extends PaddockApiError {}
export class Internal extends PaddockApiError {}

const CLASSES: Record<ErrorCode, typeof PaddockApiError> = {
  invalid: Invalid,
  unauthenticated: Unauthenticated,
  forbidden: Forbidden,
  not_found: NotFound,
  conflict: Conflict,
  too_large: TooLarge,
  rate_limited: RateLimited,
  unavailable: Unavailable,
  internal: Internal,
};

/** The error of an answer's code (an unknown code is `internal`). */
export function apiError(code: string, message: string, status: number, options?: { cause?: unknown; retryAfterMs?: number | undefined }): PaddockApiError {
  const known = (Object.values(ErrorCode) as string[]).includes(code) ? (code as ErrorCode) : ErrorCode.internal;
  return new CLASSES[known](known, message, status, options);
}
