import { pino, type Logger } from "pino";

export type { Logger } from "pino";

/**
 * Paths pino blanks in every log line. Tokens, secrets and terminal bytes must
 * never reach a log; callers must not log them, and this is the second line.
 */
const REDACT = [
  "token",
  "*.token",
  "authorization",
  "*.authorization",
  "headers.authorization",
  "req.headers.authorization",
  "secret",
  "*.secret",
  "password",
  "*.password",
  "data",
  "bytes",
];

export function createLogger(opts: { service: string; level?: string; destination?: NodeJS.WritableStream }): Logger {
  return pino(
    {
      name: opts.service,
      level: opts.level ?? "info",
      redact: { paths: REDACT, censor: "[redacted]" },
      base: { service: opts.service, pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    opts.destination ?? process.stdout,
  );
}

/** A logger that drops everything; for tests that construct services directly. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
