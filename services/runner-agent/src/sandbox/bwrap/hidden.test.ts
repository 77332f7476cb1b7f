import { describe, expect, it } from "vitest";
import { hiddenByTmpfs } from "./backend.ts";

describe("what a bwrap session's root hides besides the host's private dirs", () => {
  it("hides the data dir and the credential files' dirs, once each, outermost only", () => {
    expect(hiddenByTmpfs(["/var/lib/paddock/runner-1", "/etc/paddock/creds", "/etc/paddock/creds"])).toEqual(["/var/lib/paddock/runner-1", "/etc/paddock/creds"]);
    // `npm run up`: the runner's data dir lies inside the dir of the secrets key and dev token.
    expect(hiddenByTmpfs(["/srv/up/runner-local-1", "/srv/up", "/srv/up/creds"])).toEqual(["/srv/up"]);
    expect(hiddenByTmpfs(["/srv/up2", "/srv/up"])).toEqual(["/srv/up2", "/srv/up"]);
  });

  it("leaves out what the sandbox replaces anyway (its own /tmp, the emptied /home, /run, /root) and never hides /", () => {
    expect(hiddenByTmpfs(["/tmp/paddock-x/runner-1", "/run/secrets", "/home/ci/paddock", "/root/.paddock", "/"])).toEqual([]);
    expect(hiddenByTmpfs(["/tmpfoo/data"])).toEqual(["/tmpfoo/data"]);
  });
});
