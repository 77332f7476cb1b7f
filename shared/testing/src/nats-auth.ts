/**
 * Per-service NATS credentials (issue 7, item 4): nats-server `authorization`
 * config giving each service a user with only the subjects it needs, and each
 * runner a user that can publish and consume only its own subjects.
 *
 * The permission lists follow ARCHITECTURE.md (Subjects, Storage) and the
 * JetStream API subjects nats.js 3.x uses (see deploy/nats/README-isolation.md
 * for the derivation and for what subject permissions cannot scope).
 */
import { connect, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { ControlPlaneUsers, gatewayPermissions, inboxPrefixOf, observerPermissions, ObserverUser, provisionerPermissions, recorderPermissions, runnerPermissions, runnerUser, schedulerPermissions, type Permissions, type RunnerPrincipal } from "@paddock/contracts";

export { ControlPlaneUsers, gatewayPermissions, observerPermissions, ObserverUser, provisionerPermissions, recorderPermissions, runnerPermissions, runnerUser, schedulerPermissions, type Permissions, type RunnerPrincipal } from "@paddock/contracts";

/** nkeys for tests of joined runners (their seeds, the callout's issuer, the system user). */
export { createAccount, createUser, fromSeed } from "@nats-io/nkeys";

export interface NatsAuthOptions {
  runners: RunnerPrincipal[];
  /** Password per user name (`scheduler`, `gateway`, `event-recorder`, `runner-<len(pool)>-<pool>-<runner>`, `provisioner`). */
  passwords: Record<string, string>;
  /**
   * Render `password: $<USER>_PASS` (a nats-server variable, resolved from the
   * environment) instead of the literal passwords: for committed example configs.
   */
  passwordVariables?: boolean;
  /** Also emit the `provisioner` user (full JetStream API, no application subjects). Default true when it has a password. */
  provisioner?: boolean;
  /** Also emit the read-only `observer` user (its own durables on AUDIT). Default true when it has a password. */
  observer?: boolean;
  /**
   * Runners that join (docs/decisions/0061-runner-join.md): every connection
   * not of a user above goes to the gateway's auth callout, which admits
   * joined runners' nkeys. The users above (static runners too) bypass it.
   */
  callout?: NatsCalloutOptions;
}

export interface NatsCalloutOptions {
  /** Public account nkey (`A...`) whose seed signs the callout's answers (the gateway's PADDOCK_AUTH_CALLOUT_ISSUER_SEED). */
  issuer: string;
  /**
   * Public user nkey (`U...`) of the system-account principal that closes a
   * revoked runner's connections (the gateway's PADDOCK_NATS_SYSTEM_SEED). Also
   * what makes nats-server send a nonce, which the callout needs to check a
   * runner holds its key: the server sends one only when some nkey user exists.
   */
  systemUser: string;
}

/** Every user and its permissions. */
export function natsPrincipals(opts: Pick<NatsAuthOptions, "runners"> & { provisioner?: boolean; observer?: boolean }): Record<string, Permissions> {
  const users: Record<string, Permissions> = {
    [ControlPlaneUsers.scheduler]: schedulerPermissions(opts.runners),
    [ControlPlaneUsers.gateway]: gatewayPermissions(),
    [ControlPlaneUsers.recorder]: recorderPermissions(),
  };
  for (const r of opts.runners) users[runnerUser(r.poolId, r.runnerId)] = runnerPermissions(r, opts.runners);
  if (opts.provisioner) users[ControlPlaneUsers.provisioner] = provisionerPermissions();
  if (opts.observer) users[ObserverUser] = observerPermissions();
  return users;
}

const q = (s: string) => JSON.stringify(s);
const list = (xs: string[]) => `[${xs.map(q).join(", ")}]`;

function renderPermissions(p: Permissions, indent: string): string {
  const lines = [`${indent}publish = { allow = ${list(p.publish.allow)}${p.publish.deny ? `, deny = ${list(p.publish.deny)}` : ""} }`];
  lines.push(`${indent}subscribe = { allow = ${list(p.subscribe.allow)}${p.subscribe.deny ? `, deny = ${list(p.subscribe.deny)}` : ""} }`);
  if (p.allowResponses) lines.push(`${indent}allow_responses = { max: 1, expires: "1m" }`);
  return lines.join("\n");
}

/** The environment variable a rendered example config reads a user's password from: `runner-7-default-r1` → `RUNNER_7_DEFAULT_R1_PASS`. */
export function passwordVariable(user: string): string {
  return `${user.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_PASS`;
}

/** nats-server config text: an `authorization { users = [...] }` block, one user per service and per runner. */
export function natsAuthConfig(opts: NatsAuthOptions): string {
  const has = (user: string) => opts.passwordVariables === true || opts.passwords[user] !== undefined;
  const users = natsPrincipals({ runners: opts.runners, provisioner: opts.provisioner ?? has(ControlPlaneUsers.provisioner), observer: opts.observer ?? has(ObserverUser) });
  const blocks = Object.entries(users).map(([user, perms]) => {
    const pass = opts.passwordVariables ? `$${passwordVariable(user)}` : opts.passwords[user];
    if (pass === undefined) throw new Error(`no password for NATS user ${user}`);
    return [`    {`, `      user: ${q(user)}`, `      password: ${opts.passwordVariables ? pass : q(pass)}`, `      permissions: {`, renderPermissions(perms, "        "), `      }`, `    }`].join("\n");
  });
  const callout = opts.callout ? calloutConfig(opts.callout, Object.keys(users)) : { inside: [], after: [] };
  return [`authorization {`, `  users = [`, blocks.join("\n"), `  ]`, ...callout.inside, `}`, ...callout.after, ""].join("\n");
}

/** The system account used to list and close connections. */
export const SYSTEM_ACCOUNT = "SYS";

/** `auth_callout` inside the authorization block (every configured user bypasses it), and the system account with its one nkey user. */
function calloutConfig(c: NatsCalloutOptions, users: string[]): { inside: string[]; after: string[] } {
  return {
    inside: [`  auth_callout {`, `    issuer: ${q(c.issuer)}`, `    auth_users: ${list([...users, c.systemUser])}`, `  }`],
    after: [`accounts {`, `  ${SYSTEM_ACCOUNT}: { users = [ { nkey: ${q(c.systemUser)} } ] }`, `}`, `system_account: ${SYSTEM_ACCOUNT}`],
  };
}

/**
 * Connects as one of the users above the way services do (shared/bus
 * connectBus): replies under the user's own inbox prefix, the only inbox its
 * permissions let it read.
 */
export function connectAs(servers: string, user: string, pass: string, opts: Partial<ConnectionOptions> = {}): Promise<NatsConnection> {
  return connect({ servers, user, pass, inboxPrefix: inboxPrefixOf(user), ...opts });
}
