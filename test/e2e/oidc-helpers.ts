/**
 * The steps a person takes at the test provider (oidc-provider's development
 * login and consent pages) in Chromium, and a stack signed on to it.
 */
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Page } from "playwright-core";
import { actorIdOfClaim } from "@paddock/contracts";
import { startOidcProvider, startStack, type OidcProviderHandle, type Stack } from "@paddock/testing";

/** The accounts of the test provider: a member of `default`, a member of two workspaces, a stranger, an unverified email. */
export const ACCOUNTS = {
  alice: { email: "alice@example.com", email_verified: true, name: "Alice" },
  bob: { email: "bob@example.com", email_verified: true, name: "Bob" },
  nora: { email: "nora@example.com", email_verified: true, name: "Nora" },
  eve: { email: "eve@example.com", email_verified: false, name: "Eve" },
} as const;
export type Account = keyof typeof ACCOUNTS;

/** The Paddock actor id of an account (its email claim, escaped). */
export function actorOf(account: Account): string {
  const id = actorIdOfClaim(ACCOUNTS[account].email);
  if (id === undefined) throw new Error(`no actor id for ${account}`);
  return id;
}

/** A stack whose gateway signs on through a fresh provider; alice is a member of `default`, bob of `default` and `team-b`. */
export async function startSsoStack(): Promise<{ stack: Stack; idp: OidcProviderHandle }> {
  const idp = await startOidcProvider({ accounts: ACCOUNTS });
  const stack = await startStack({
    env: {
      gateway: {
        PADDOCK_OIDC_ISSUER: idp.issuer,
        PADDOCK_OIDC_CLIENT_ID: idp.webClientId,
        PADDOCK_OIDC_CLIENT_SECRET: idp.webClientSecret,
        PADDOCK_OIDC_CLI_CLIENT_ID: idp.cliClientId,
      },
    },
  });
  idp.allowWebRedirect(`${stack.url}/v1/auth/oidc/callback`);
  const member = async (ws: string, account: Account) => {
    const res = await fetch(`${stack.url}/v1/workspaces/${ws}/members/${actorOf(account)}`, {
      method: "PUT",
      headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" },
      body: JSON.stringify({ role: "member" }),
    });
    if (res.status !== 200) throw new Error(`member ${account} of ${ws}: ${res.status}`);
  };
  const ws = await fetch(`${stack.url}/v1/workspaces`, { method: "POST", headers: { authorization: `Bearer ${stack.token}`, "content-type": "application/json" }, body: JSON.stringify({ id: "team-b" }) });
  if (ws.status !== 201) throw new Error(`workspace team-b: ${ws.status}`);
  await member("default", "alice");
  await member("default", "bob");
  await member("team-b", "bob");
  return { stack, idp };
}

/** Signs in at the provider's pages (any password), then consents if asked. */
export async function signInAtProvider(page: Page, account: Account): Promise<void> {
  await page.locator('input[name="login"]').fill(account);
  await page.locator('input[name="password"]').fill("any password");
  await page.locator("button.login-submit").click();
  await page.getByRole("button", { name: "Continue" }).click();
}

/** Every key of a KV bucket (what a refused request must not have changed). */
export async function keysOf(nc: NatsConnection, bucket: string): Promise<string[]> {
  const kv = await new Kvm(nc).open(bucket);
  const out: string[] = [];
  for await (const k of await kv.keys()) out.push(k);
  return out.sort();
}
