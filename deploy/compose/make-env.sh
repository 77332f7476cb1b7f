#!/bin/sh
# Writes deploy/compose/paddock.env (mode 0600, git-ignored): one NATS password
# per principal of ../nats/isolated.conf.example, the secrets key, the session
# token secret and the gateway's dev token, all random. docker compose reads it
# with --env-file; each service receives only its own password.
set -eu
out="$(dirname "$0")/paddock.env"
[ -e "$out" ] && { echo "$out exists; remove it to make new secrets" >&2; exit 1; }
umask 077
rand() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
{
  for user in SCHEDULER GATEWAY EVENT_RECORDER RUNNER_7_DEFAULT_RUNNER_1 PROVISIONER OBSERVER; do
    echo "${user}_PASS=$(rand 24)"
  done
  echo "PADDOCK_SECRETS_KEY=$(rand 32)"
  echo "PADDOCK_SESSION_TOKEN_SECRET=$(rand 32)"
  echo "PADDOCK_DEV_TOKEN=$(rand 24)"
} > "$out"
echo "wrote $out"
