import { Id, PublicApi } from "@paddock/contracts";
import { positionals, parseCommand, type Command, type Ctx } from "../command.ts";
import { saveToken } from "../credentials.ts";
import { ApiClient } from "../http.ts";
import { ApiError, ExitCode, UsageError, write } from "../io.ts";
import { browserLogin, deviceLogin, LOGIN_WAIT_MS, openBrowser, type LoginPrompt, type Provider } from "../oidc-login.ts";
import { time } from "../format.ts";

const HELP = `usage: paddock login [--workspace WS] [--device] [--no-browser]

Signs you in through your organisation's identity provider (single sign-on)
and keeps the token the gateway gives you for this gateway, in
credentials.json under $PADDOCK_CONFIG_DIR (else ~/.config/paddock, 0600).
Later commands use it unless --token or $PADDOCK_TOKEN is given.

By default a browser opens on the provider's sign-in page (the URL is
printed too); the provider sends you back to this machine on 127.0.0.1.
With --device, you sign in on any other device with the printed code.
  --workspace WS  the workspace to sign in to (needed when you are a member of several)
  --device        use the device code flow (no browser on this machine)
  --no-browser    print the URL only, do not try to open a browser
`;

/** `paddock login`: single sign-on through the gateway's OpenID Connect provider. */
export const loginCommand: Command = {
  name: "login",
  summary: "sign in through single sign-on and keep the token",
  help: HELP,
  async run(ctx, argv) {
    const args = parseCommand(ctx, this, argv, { workspace: { type: "string" }, device: { type: "boolean" }, "no-browser": { type: "boolean" } });
    if (!args) return ExitCode.ok;
    positionals(this, args.positionals, []);
    const workspaceId = args.flags.workspace;
    if (workspaceId !== undefined && !Id.safeParse(workspaceId).success) throw new UsageError(`paddock login: --workspace: not a workspace id: ${JSON.stringify(workspaceId)}`);
    if (args.flags.device && args.flags["no-browser"]) throw new UsageError("paddock login: --device never opens a browser: drop --no-browser");
    if (ctx.config.configDir === undefined) throw new UsageError("paddock login: nowhere to keep the token: set HOME or PADDOCK_CONFIG_DIR");
    const api = new ApiClient(ctx.config.url, "");
    const provider = await providerOf(api);
    const prompt = promptOf(ctx, args.flags["no-browser"] !== true);
    const signal = AbortSignal.timeout(LOGIN_WAIT_MS);
    const idToken = args.flags.device ? await deviceLogin(provider, prompt, signal) : await browserLogin(provider, prompt, signal);
    const minted = await api.call(PublicApi.oidcExchange, { body: { idToken, ...(workspaceId !== undefined ? { workspaceId } : {}) } });
    const file = saveToken(ctx.config.configDir, ctx.config.url, minted);
    await write(ctx.io.stdout, `logged in as ${minted.actor.id} in workspace ${minted.workspaceId} (until ${time(minted.expiresAt)})\n`);
    ctx.io.stderr.write(`[paddock] token ${minted.id} kept in ${file}\n`);
    return ExitCode.ok;
  },
};

async function providerOf(api: ApiClient): Promise<Provider> {
  const d = await api.call(PublicApi.oidcDiscovery);
  if (!d.enabled || d.issuer === undefined) throw new ApiError("not_found", "this gateway has no single sign-on (PADDOCK_OIDC_ISSUER)");
  if (d.cliClientId === undefined) throw new ApiError("not_found", "this gateway has no CLI client for single sign-on (PADDOCK_OIDC_CLI_CLIENT_ID)");
  return { issuer: d.issuer, clientId: d.cliClientId, scopes: d.scopes ?? "openid" };
}

function promptOf(ctx: Ctx, open: boolean): LoginPrompt {
  return {
    browser: (url) => {
      ctx.io.stderr.write(`[paddock] sign in at: ${url}\n`);
      if (open) openBrowser(url);
    },
    device: (uri, code, complete) => {
      ctx.io.stderr.write(`[paddock] on any device, open ${uri} and enter the code ${code}\n`);
      if (complete !== undefined) ctx.io.stderr.write(`[paddock] or open: ${complete}\n`);
    },
  };
}
