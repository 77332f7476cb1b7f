import { connect, nkeyAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "@paddock/logging";

/** How long after the last server's answer a connection listing waits for more (a cluster answers once per server). */
const CONNZ_STALL_MS = 300;
/** The longest a listing waits for the first answer. */
const CONNZ_MAX_WAIT_MS = 5_000;

interface ConnzAnswer {
  server?: { id?: string };
  data?: { connections?: Array<{ cid?: number }> };
  error?: { description?: string };
}

/**
 * Closes a NATS user's live connections through the system account: every
 * server lists that user's open connections (`$SYS.REQ.SERVER.PING.CONNZ`
 * filtered by user) and each is kicked on its own server
 * (`$SYS.REQ.SERVER.<id>.KICK`). The system user authenticates with an nkey
 * (no password in any file). Connected lazily: only a revoke needs it.
 */
export class ConnectionKicker {
  private opening: Promise<NatsConnection> | undefined;

  constructor(
    private readonly servers: string,
    private readonly systemSeed: string,
    private readonly log: Logger,
  ) {}

  /** Kicks every open connection of `user`; answers how many were closed. */
  async kickUser(user: string): Promise<number> {
    const nc = await this.connection();
    const answers = await nc.requestMany("$SYS.REQ.SERVER.PING.CONNZ", JSON.stringify({ user, auth: true }), { strategy: "stall", stall: CONNZ_STALL_MS, maxWait: CONNZ_MAX_WAIT_MS });
    const kicks: Array<Promise<unknown>> = [];
    for await (const m of answers) {
      const a = m.json<ConnzAnswer>();
      const server = a.server?.id;
      if (a.error || !server) continue;
      for (const c of a.data?.connections ?? []) {
        if (typeof c.cid === "number") kicks.push(nc.request(`$SYS.REQ.SERVER.${server}.KICK`, JSON.stringify({ cid: c.cid })));
      }
    }
    const settled = await Promise.allSettled(kicks);
    const failed = settled.filter((s) => s.status === "rejected").length;
    if (failed > 0) this.log.warn({ user, failed }, "some connections could not be kicked");
    return settled.length - failed;
  }

  async close(): Promise<void> {
    const nc = await this.opening?.catch(() => undefined);
    await nc?.close();
  }

  private connection(): Promise<NatsConnection> {
    this.opening ??= connect({
      servers: this.servers.split(",").map((s) => s.trim()),
      name: "gateway-system",
      authenticator: nkeyAuthenticator(new TextEncoder().encode(this.systemSeed)),
      maxReconnectAttempts: -1,
    }).catch((err: unknown) => {
      this.opening = undefined;
      throw err;
    });
    return this.opening;
  }
}
