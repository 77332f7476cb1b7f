import type { NatsConnection } from "@nats-io/transport-node";

/**
 * Runs `action` and resolves with the permissions violation the server
 * reported for `subject`: either the action's own rejection (a request, a
 * JetStream publish) or the async error on the connection's status stream
 * (a plain publish or subscribe). Never a sleep: whichever comes first.
 */
export async function denied(nc: NatsConnection, subject: string, action: () => Promise<unknown> | unknown): Promise<string> {
  const status = (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error" && /permissions violation/i.test(String(s.error)) && String(s.error).includes(subject)) return String(s.error);
    }
    return "connection closed";
  })();
  const acted = (async () => {
    try {
      await action();
    } catch (err) {
      const text = `${String(err)} ${String((err as { cause?: unknown }).cause ?? "")}`;
      if (/permission/i.test(text)) return text;
      return status; // e.g. a timeout after the violation: the status event carries it
    }
    return status;
  })();
  return Promise.race([status, acted]);
}
