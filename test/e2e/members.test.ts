/**
 * Workspaces and members through the CLI against the real stack (issue 28
 * item 7): the dev token (a fleet operator) creates a workspace, adds its
 * first admin and mints their token; that admin manages the workspace with
 * it; bad invocations are usage errors that ask nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@paddock/testing";
import { expectUsageError, runCli } from "../../cli/src/testing/run-cli.ts";

let stack: Stack;
const as = (token: string) => ({ PADDOCK_URL: stack.url, PADDOCK_TOKEN: token });

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

describe("paddock workspace and member", () => {
  it("an operator makes a workspace and its admin; the admin adds, lists and removes members with a token of it", async () => {
    const op = as(stack.token);
    expect(await runCli(["workspace", "create", "team-a", "--name", "Team A"], op)).toMatchObject({ code: 0, stdout: "team-a\n" });
    expect(await runCli(["member", "add", "ana", "--workspace", "team-a", "--role", "admin"], op)).toMatchObject({ code: 0, stdout: "ana admin\n" });
    const minted = await runCli(["token", "create", "--for", "ana", "--workspace", "team-a"], op);
    expect(minted.code).toBe(0);
    const ana = as(minted.stdout.trim());

    expect(await runCli(["member", "add", "bo", "--workspace", "team-a"], ana)).toMatchObject({ code: 0, stdout: "bo member\n" });
    const listed = await runCli(["member", "ls", "--workspace", "team-a", "--json"], ana);
    expect(JSON.parse(listed.stdout)).toEqual([
      { workspaceId: "team-a", actorId: "ana", role: "admin" },
      { workspaceId: "team-a", actorId: "bo", role: "member" },
    ]);
    expect((await runCli(["ls"], ana)).code).toBe(0);
    expect(await runCli(["member", "rm", "bo", "--workspace", "team-a"], ana)).toMatchObject({ code: 0, stdout: "bo\n" });
    // The last admin stays; another workspace is not hers to see.
    expect((await runCli(["member", "rm", "ana", "--workspace", "team-a"], ana)).code).not.toBe(0);
    expect((await runCli(["member", "ls", "--workspace", "default"], ana)).stderr).toMatch(/not found/i);
    expect((await runCli(["workspace", "create", "team-b"], ana)).stderr).toMatch(/fleet operator/);
  });

  it("bad invocations are usage errors that ask nothing", async () => {
    const env = { PADDOCK_TOKEN: "t", PADDOCK_URL: "http://127.0.0.1:9" };
    const bad: Array<[string[], RegExp]> = [
      [["workspace"], /expected a subcommand/],
      [["workspace", "create"], /expected ID/],
      [["workspace", "create", "a", "b"], /expected ID/],
      [["member"], /expected a subcommand/],
      [["member", "ls"], /--workspace WS is required/],
      [["member", "add", "--workspace", "w"], /expected ACTOR/],
      [["member", "add", "x", "--workspace", "w", "--role", "owner"], /--role is member or admin/],
      [["member", "rm", "x"], /--workspace WS is required/],
      [["token", "create", "--for", "x"], /--for ACTOR and --workspace WS go together/],
      [["token", "create", "--workspace", "w"], /--for ACTOR and --workspace WS go together/],
    ];
    for (const [argv, msg] of bad) await expectUsageError(argv, msg, env);
  });
});
