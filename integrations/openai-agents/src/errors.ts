/**
 * Paddock's errors as the framework's sandbox errors: the agent runtime and
 * its tools handle `SandboxError`s (a tool's error becomes text the model
 * reads; `retryable` and `code` are what callers branch on), so nothing of
 * the SDK's classes leaks through the adapter. The Paddock code, HTTP status
 * and message stay in `details`.
 */
import { Conflict, NotFound, PaddockApiError } from "@paddock/sdk";
import {
  SandboxError,
  SandboxExecTransportError,
  SandboxLifecycleError,
  SandboxProviderError,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceReadNotFoundError,
} from "@openai/agents/sandbox";

export const PROVIDER = "paddock";

/** What the adapter was doing when a call failed: it picks the class a Paddock error maps to. */
export const Operation = {
  create: "create",
  session: "session",
  exec: "exec",
  read: "read",
  write: "write",
  list: "list",
  remove: "remove",
  ports: "ports",
} as const;
export type Operation = (typeof Operation)[keyof typeof Operation];

/** True when the gateway could not be reached or answered that it (or what it needs) is unavailable. */
function isTransport(err: PaddockApiError): boolean {
  return err.status === 0 || err.code === "unavailable";
}

/** The framework error of a failed Paddock call (a SandboxError passes through unchanged). */
export function sandboxErrorOf(err: unknown, op: Operation, details: Record<string, unknown> = {}): Error {
  if (err instanceof SandboxError) return err;
  if (!(err instanceof PaddockApiError)) {
    return new SandboxProviderError(`Paddock ${op} failed: ${err instanceof Error ? err.message : String(err)}`, { provider: PROVIDER, operation: op, ...details });
  }
  const d = { provider: PROVIDER, operation: op, paddockCode: err.code, status: err.status, paddockRetryable: err.retryable, message: err.message, ...details };
  const msg = `Paddock ${op} failed (${err.code}): ${err.message}`;
  if (op === Operation.exec && isTransport(err)) return new SandboxExecTransportError(msg, d);
  // A read's not_found is the file's unless the session itself is gone (then the session call says so).
  if (err instanceof NotFound && op === Operation.read && !/session/i.test(err.message)) return new SandboxWorkspaceReadNotFoundError(msg, d);
  if (err instanceof NotFound && op === Operation.session) return new SandboxLifecycleError(`Paddock session not found: ${err.message}`, d);
  // conflict: the session is not in a state that serves the call (suspended, ending).
  if (err instanceof Conflict) return new SandboxLifecycleError(msg, d);
  return new SandboxProviderError(msg, d);
}

/** The framework's "unsupported" error for what Paddock cannot do (README: What it does not do). */
export function unsupported(feature: string, message: string, details: Record<string, unknown> = {}): SandboxUnsupportedFeatureError {
  return new SandboxUnsupportedFeatureError(`PaddockSandboxClient: ${message}`, { provider: PROVIDER, feature, ...details });
}

/** Runs a Paddock call, turning its failure into the framework's error for `op`. */
export async function paddockCall<T>(op: Operation, details: Record<string, unknown>, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw sandboxErrorOf(err, op, details);
  }
}
