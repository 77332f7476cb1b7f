/**
 * The escape battery (issue #23 item 8): a bash script a hostile session runs
 * as its command, trying what an attacker inside a session did against the
 * process backend. Each attempt prints `HELD:<tag>` when it failed and
 * `ESCAPED:<tag> <what it got>` when it succeeded, so a caller asserts
 * `escapedOf(output)` is empty. The session's own work (its workspace, its
 * gateway with its own token) prints `OWN:<tag>` lines. Used by the e2e suite
 * (test/e2e/sandbox-escape.test.ts) and the chaos bad-input sandbox case.
 */

export interface EscapeTargets {
  /** The stack's data dir (dev token, credentials, keys) and below it the runner's. */
  dataDir: string;
  runnerDataDir: string;
  /** Another session: its id, its workspace on the host, the address and port it listens on. */
  other: { sessionId: string; workspace: string; address: string; port: number };
  /** Host processes of the control plane (services, NATS): their environ and a kill. */
  servicePids: number[];
  /** NATS's port and the host addresses to try it on (127.0.0.1 and the link host are always tried). */
  natsPort: number;
  hostAddresses: string[];
  /** Other host ports to try on the same addresses (the services' ops ports, say). */
  hostPorts?: number[];
  /** Exhaust processes, then hold them until a line arrives on stdin (the terminal). */
  forkBomb: boolean;
  /** Allocate this many bytes at once (more than the session's memory limit, where its runner enforces one): held when the allocation is SIGKILLed. */
  memoryHogBytes?: number;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The battery's bash script; it ends with `BATTERY-DONE.` then keeps running (`exec sleep`). */
export function escapeBattery(t: EscapeTargets): string {
  const d = q(t.dataDir);
  const r = q(t.runnerDataDir);
  const ws = q(t.other.workspace);
  const lines = [
    // try TAG CMD...: HELD unless the command succeeded and printed something.
    'try() { tag=$1; shift; if out=$("$@" 2>/dev/null) && [ -n "$out" ]; then echo "ESCAPED:$tag $(printf %s "$out" | head -c 200 | tr "\\n" " ")"; else echo "HELD:$tag"; fi; }',
    // wrote TAG FILE: HELD unless the file could be created.
    'wrote() { if (echo x > "$2") 2>/dev/null; then echo "ESCAPED:$1 $2"; else echo "HELD:$1"; fi; }',
    // reach TAG HOST PORT: HELD unless a TCP connection opened.
    `reach() { if timeout 5 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then echo "ESCAPED:$1"; else echo "HELD:$1"; fi; }`,
    // status METHOD PATH [BODY]: the gateway's HTTP status for the session's own token.
    'status() { curl -s -o /dev/null -w %{http_code} -X "$1" -H "authorization: Bearer $PADDOCK_TOKEN" -H "content-type: application/json" ${3:+--data "$3"} "$PADDOCK_URL$2"; }',
    'echo "OWN:uid=$(id -u)"',
    `try read-dev-token cat ${d}/dev-token`,
    `try read-session-token-secret cat ${d}/session-token-secret`,
    `try read-secrets-key cat ${d}/secrets-key`,
    `try read-creds sh -c 'cat ${t.dataDir.replace(/'/g, "")}/creds/*'`,
    `try list-data-dir ls -A ${d}`,
    `try list-runner-data-dir ls -A ${r}`,
    `try read-other-workspace sh -c 'cat ${t.other.workspace.replace(/'/g, "")}/*'`,
    `try list-other-workspace ls -A ${ws}`,
    `for p in ${t.servicePids.join(" ")}; do try environ-$p cat /proc/$p/environ; done`,
    "try environ-any sh -c \"cat /proc/*/environ | tr '\\\\0' '\\\\n' | grep -E '^PADDOCK_(NATS|DEV_TOKEN|SESSION_TOKEN_SECRET|SECRETS_KEY)'\"",
    `for p in ${t.servicePids.join(" ")}; do if kill -9 $p 2>/dev/null; then echo ESCAPED:kill-$p; else echo HELD:kill-$p; fi; done`,
    'LINK=${PADDOCK_URL#http://}; LINK=${LINK%%:*}',
    `for h in 127.0.0.1 "$LINK" ${t.hostAddresses.map(q).join(" ")}; do reach "nats-$h" "$h" ${t.natsPort} & for p in ${(t.hostPorts ?? []).join(" ")}; do reach "port-$p-$h" "$h" $p & done; done; wait`,
    `reach other-session-port ${q(t.other.address)} ${t.other.port}`,
    ...["/escape", "/etc/escape", "/usr/escape", `${t.dataDir}/escape`, `${t.runnerDataDir}/escape`, `${t.other.workspace}/escape`].map((f, i) => `wrote write-${i} ${q(f)}`),
    `s=$(status GET /v1/sessions/${t.other.sessionId}); if [ "$s" = 404 ]; then echo HELD:token-read-other; else echo "ESCAPED:token-read-other $s"; fi`,
    `s=$(status DELETE /v1/sessions/${t.other.sessionId}); if [ "$s" = 404 ]; then echo HELD:token-delete-other; else echo "ESCAPED:token-delete-other $s"; fi`,
    `s=$(status POST /v1/tokens '{}'); if [ "$s" = 403 ]; then echo HELD:token-mint; else echo "ESCAPED:token-mint $s"; fi`,
    ...(t.memoryHogBytes ? [`perl -e ${q(`$x = "a" x ${t.memoryHogBytes}`)}; s=$?; if [ "$s" = 137 ]; then echo HELD:memory-hog; else echo "ESCAPED:memory-hog $s"; fi`] : []),
    // The session's own work (after the hog, if any: the session lives on).
    'echo own-work > own.txt && echo "OWN:workspace=$(cat own.txt)"',
    'echo "OWN:self=$(status GET /v1/sessions/$PADDOCK_SESSION_ID)"',
  ];
  if (t.forkBomb) {
    // Forks until the kernel refuses (RLIMIT_NPROC), holds the children until a line arrives on stdin, then kills them.
    const perl = [
      "my @k; while (1) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 600; exit 0 } push @k, $p }",
      'print "FORK-LIMIT:" . scalar(@k) . "\\n"; $| = 1; print "FORK-HOLDING.\\n"; my $l = <STDIN>;',
      'kill "KILL", @k; waitpid($_, 0) for @k; print "FORK-RELEASED.\\n";',
    ].join(" ");
    lines.push(`perl -e ${q(perl)}`);
  }
  lines.push("echo BATTERY-DONE.", "exec sleep 600");
  return lines.join("\n");
}

/** The attempts that succeeded (`ESCAPED:<tag> ...` lines). */
export function escapedOf(output: string): string[] {
  return [...output.matchAll(/^ESCAPED:(.*)$/gm)].map((m) => (m[1] ?? "").trim());
}

/** The attempts that were stopped. */
export function heldOf(output: string): string[] {
  return [...output.matchAll(/^HELD:(\S+)/gm)].map((m) => m[1] ?? "");
}
