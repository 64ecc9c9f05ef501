#!/usr/bin/env bash
# The container image (Containerfile), built and run here with Podman and no registry in reach:
#   - the runtime stage (target runtime-prebuilt) from the binary built on this machine
#     (swift build -c release --static-swift-stdlib --product latchkey), on a debian:bookworm-slim made here with
#     debootstrap --variant=minbase and imported under that tag;
#   - then, through a published port: /healthz; sign-ins through `latchkey emulate` running on this machine, outside the
#     container (Sign in with Apple with its code exchange, signed with a key mounted as a secret file, and Google); the
#     process runs as non-root; the HEALTHCHECK; SIGTERM stops it within 10 s, exit 0; a new container on the same
#     volume keeps the users, the sessions (refresh tokens still rotate, access tokens still verify) and the signing keys
#     (the same kid in /.well-known/jwks.json), including a sign-in completed just before the stop.
# Leaves the image tagged latchkey:local and prints its size. Runs as root (CI does): it installs podman, runc,
# slirp4netns and debootstrap from Debian's packages when they are missing.
#
# LATCHKEY_CONTAINER_BINARY=PATH   use this static binary instead of building one
# LATCHKEY_CONTAINER_FRESH_BASE=1  make debian:bookworm-slim again even if Podman already has one
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
say() { echo "container-test: $*"; }
fail() {
  echo "container-test: FAIL: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || fail "run as root: it installs packages, runs debootstrap and rootful Podman"

# --- Tools, from Debian's packages.
missing=()
for pair in podman:podman runc:runc slirp4netns:slirp4netns debootstrap:debootstrap python3:python3 strip:binutils; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ! -f /usr/include/zlib.h ] && [ -z "${LATCHKEY_CONTAINER_BINARY:-}" ]; then missing+=(zlib1g-dev); fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# docs/deployment.md shows docs/compose.yaml without its comments: the two must not drift apart.
python3 - <<'PY' || fail "the compose example in docs/deployment.md differs from docs/compose.yaml (less its comments and name)"
import sys
block = open("docs/deployment.md").read().split("```yaml\n", 1)[1].split("```", 1)[0]
lines = [line for line in open("docs/compose.yaml").read().splitlines() if not line.lstrip().startswith("#") and not line.startswith("name:")]
sys.exit(0 if block == "\n".join(lines).strip() + "\n" else 1)
PY

work="$(mktemp -d /tmp/latchkey-container.XXXXXX)"
# Podman on this kind of machine: crun refuses the kernel's hybrid cgroups (v1 controllers beside a v2 hierarchy),
# so runc; no systemd, so cgroupfs and a file for events; and the sandbox refuses Podman's default limits (nofile,
# nproc), so none are set and the container keeps the caller's.
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$work/containers.conf"
# The network: slirp4netns publishes ports on the host's loopback, and lets the container reach the host's loopback at
# 10.0.2.2, where the emulator listens. No firewall rule is added and nothing listens beyond loopback.
network="slirp4netns:allow_host_loopback=true"
host_from_container="10.0.2.2"
image="latchkey:local"
volume="latchkey-container-test-$$"
containers=()
emulator_pid=""

cleanup() {
  local status=$?
  set +e
  if [ "$status" != 0 ]; then
    for container in "${containers[@]}"; do
      podman container exists "$container" || continue
      echo "--- podman logs $container (last 40 lines)" >&2
      podman logs --tail 40 "$container" >&2 2>&1
    done
    [ -f "$work/emulator.log" ] && { echo "--- emulator" >&2; tail -20 "$work/emulator.log" >&2; }
  fi
  for container in "${containers[@]}"; do podman rm -f -t 0 "$container" >/dev/null 2>&1; done
  podman volume rm -f "$volume" >/dev/null 2>&1
  [ -n "$emulator_pid" ] && kill "$emulator_pid" 2>/dev/null && wait "$emulator_pid" 2>/dev/null
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

podman info >/dev/null || fail "podman cannot run here (podman info failed)"
# Podman schedules a HEALTHCHECK with a systemd timer; without systemd it says so at every start and stop (the check
# itself still runs with `podman healthcheck run`). Those lines are left out; any other error is shown.
pm() {
  local status=0
  podman "$@" 2>"$work/podman.err" || status=$?
  grep -v "unable to get systemd connection" "$work/podman.err" >&2 || true
  return "$status"
}

# --- The base image, made here: debootstrap's minimal Debian 12, trimmed as the slim image is (no apt lists,
# documentation or translations), imported under the tag the Containerfile starts from.
if [ -n "${LATCHKEY_CONTAINER_FRESH_BASE:-}" ] || ! podman image exists docker.io/library/debian:bookworm-slim; then
  say "making debian:bookworm-slim with debootstrap"
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
  rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin "$work"/rootfs/usr/share/doc/* \
    "$work"/rootfs/usr/share/man/* "$work"/rootfs/usr/share/info/*
  find "$work/rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  previous="$(podman image inspect --format '{{.Id}}' docker.io/library/debian:bookworm-slim 2>/dev/null || true)"
  tar -C "$work/rootfs" -c . | podman import --quiet - docker.io/library/debian:bookworm-slim >/dev/null
  [ -z "$previous" ] || podman rmi "$previous" >/dev/null 2>&1 || true
  rm -rf "$work/rootfs"
else
  say "using the debian:bookworm-slim Podman already has (LATCHKEY_CONTAINER_FRESH_BASE=1 makes it again)"
fi

# --- The binary, built here, and what it links: only libraries the slim image has.
if [ -n "${LATCHKEY_CONTAINER_BINARY:-}" ]; then
  binary="$LATCHKEY_CONTAINER_BINARY"
else
  say "building latchkey (release, static Swift standard library)"
  swift build -c release --static-swift-stdlib --product latchkey >"$work/build.log" 2>&1 ||
    { grep -E "error:" "$work/build.log" | head -20 >&2; fail "swift build failed"; }
  binary="$(swift build -c release --static-swift-stdlib --show-bin-path)/latchkey"
fi
[ -x "$binary" ] || fail "no binary at $binary"
unexpected="$(ldd "$binary" | awk '{print $1}' |
  grep -vE '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread)\.so\.[0-9]+|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libz\.so\.1)$' || true)"
[ -z "$unexpected" ] || fail "the binary links libraries beyond libc, libstdc++, libgcc_s and zlib: $unexpected"

# --- The runtime stage from that binary: a build context holding only the binary, its debug information stripped as
# the Containerfile's build stage does.
mkdir "$work/context"
cp "$binary" "$work/context/latchkey"
strip --strip-debug "$work/context/latchkey"
say "building $image (target runtime-prebuilt)"
previous="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
podman build --pull=never --format docker --target runtime-prebuilt -f Containerfile -t "$image" "$work/context" >"$work/image.log" 2>&1 ||
  { tail -30 "$work/image.log" >&2; fail "podman build failed"; }
# The image this replaces, if no container uses it.
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then podman rmi "$previous" >/dev/null 2>&1 || true; fi
if pm run --rm --entrypoint ldd "$image" /usr/local/bin/latchkey | grep "not found"; then fail "the image lacks a library the binary needs"; fi

# --- HTTP from this machine: Python's standard library (the image and this script need no curl).
call() { # METHOD URL [JSON] [BEARER]: prints the answer's body; fails unless 2xx
  python3 - "$@" <<'PY'
import sys, urllib.error, urllib.request
method, url = sys.argv[1], sys.argv[2]
body = sys.argv[3].encode() if len(sys.argv) > 3 and sys.argv[3] else None
request = urllib.request.Request(url, data=body, method=method)
if body is not None:
    request.add_header("Content-Type", "application/json")
if len(sys.argv) > 4 and sys.argv[4]:
    request.add_header("Authorization", "Bearer " + sys.argv[4])
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        sys.stdout.write(response.read().decode())
except urllib.error.HTTPError as error:
    sys.exit(f"{method} {url} answered {error.code}: {error.read().decode()[:500]}")
except OSError as error:
    sys.exit(f"{method} {url}: {error}")
PY
}
field() { # PATH (a.b.0.c) of the JSON on standard input
  python3 -c '
import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[int(key)] if isinstance(value, list) else value[key]
print(value if not isinstance(value, (dict, list)) else json.dumps(value, sort_keys=True))' "$1"
}

# --- The emulator, on this machine's loopback, outside any container.
"$binary" emulate --generate "$work/team" --port 0 >"$work/emulator.log" 2>&1 &
emulator_pid=$!
for _ in $(seq 100); do grep -q "emulator listening" "$work/emulator.log" && break; sleep 0.1; done
emulator_port="$(sed -nE 's|.*emulator listening on http://127\.0\.0\.1:([0-9]+).*|\1|p' "$work/emulator.log")"
[ -n "$emulator_port" ] || fail "the emulator did not start"
emulator="http://127.0.0.1:$emulator_port"
team_id="$(sed -nE 's/.*LATCHKEY_APPLE_TEAM_ID=(.*)/\1/p' "$work/emulator.log")"
key_id="$(sed -nE 's/.*LATCHKEY_APPLE_KEY_ID=(.*)/\1/p' "$work/emulator.log")"
say "emulator on $emulator (team $team_id), reached from the container at $host_from_container:$emulator_port"

# --- Secrets as files, readable by the image's user (uid 10001) only, mounted read-only.
install -d -m 0755 "$work/secrets"
head -c 32 /dev/urandom | base64 >"$work/secrets/encryption-key"
cp "$work/team/AuthKey_$key_id.p8" "$work/secrets/apple-key.p8"
chown 10001:10001 "$work/secrets/encryption-key" "$work/secrets/apple-key.p8"
chmod 0400 "$work/secrets/encryption-key" "$work/secrets/apple-key.p8"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
server="http://127.0.0.1:$port"
podman volume create "$volume" >/dev/null

start_container() { # NAME: runs the image on the volume, published on $port; waits for /healthz
  containers+=("$1")
  pm run -d --name "$1" --network "$network" -p "127.0.0.1:$port:8080" \
    -v "$volume:/var/lib/latchkey" -v "$work/secrets:/run/secrets:ro" \
    -e LATCHKEY_PUBLIC_URL="$server" \
    -e LATCHKEY_ENCRYPTION_KEY_FILE=/run/secrets/encryption-key \
    -e LATCHKEY_APPLE_TEAM_ID="$team_id" -e LATCHKEY_APPLE_KEY_ID="$key_id" \
    -e LATCHKEY_APPLE_PRIVATE_KEY_FILE=/run/secrets/apple-key.p8 -e LATCHKEY_APPLE_CLIENT_IDS=com.example.app \
    -e LATCHKEY_APPLE_BASE_URL="http://$host_from_container:$emulator_port" \
    -e LATCHKEY_GOOGLE_CLIENT_IDS=com.example.app \
    -e LATCHKEY_GOOGLE_DISCOVERY_URL="http://$host_from_container:$emulator_port/google/.well-known/openid-configuration" \
    "$image" >/dev/null
  for _ in $(seq 300); do
    [ "$(podman inspect --format '{{.State.Running}}' "$1")" = true ] || fail "$1 stopped: $(podman logs --tail 5 "$1" 2>&1)"
    [ "$(call GET "$server/healthz" 2>/dev/null)" = '{"status":"ok"}' ] && return 0
    sleep 0.1
  done
  fail "$1: /healthz did not answer through the published port within 30 s"
}

sign_in() { # PROVIDER [SUB]: a native sign-in minted at the emulator; prints the sign-in answer
  local provider="$1" sub="${2:-}" raw nonce authorization
  [ -n "$sub" ] || sub="$(call POST "$emulator/emulator/users" '{}' | field sub)"
  raw="$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
  nonce="$(printf %s "$raw" | sha256sum | cut -d' ' -f1)"
  authorization="$(call POST "$emulator/emulator/authorizations" \
    "{\"provider\":\"$provider\",\"sub\":\"$sub\",\"clientId\":\"com.example.app\",\"nonce\":\"$nonce\"}")"
  if [ "$provider" = apple ]; then
    call POST "$server/v1/auth/apple" "{\"identityToken\":\"$(field identityToken <<<"$authorization")\",\
\"authorizationCode\":\"$(field authorizationCode <<<"$authorization")\",\"rawNonce\":\"$raw\"}"
  else
    call POST "$server/v1/auth/$provider" "{\"idToken\":\"$(field idToken <<<"$authorization")\",\"rawNonce\":\"$raw\"}"
  fi
}
refresh() { call POST "$server/v1/token" "{\"grant_type\":\"refresh_token\",\"refresh_token\":\"$1\"}"; }
me() { call GET "$server/v1/me" "" "$1"; }
kids() { call GET "$server/.well-known/jwks.json" | python3 -c 'import json, sys; print(" ".join(sorted(k["kid"] for k in json.load(sys.stdin)["keys"])))'; }

# --- The first container.
start_container latchkey-test-first
say "ok: /healthz answers through the published port $server"

apple="$(sign_in apple)"
apple_user="$(field user.id <<<"$apple")"
[ "$(field isNewUser <<<"$apple")" = True ] || fail "the Apple sign-in made no user"
say "ok: Sign in with Apple through the emulator outside the container (code exchange signed with the mounted key): user $apple_user"
google_sub="$(call POST "$emulator/emulator/users" '{}' | field sub)"
google="$(sign_in google "$google_sub")"
google_user="$(field user.id <<<"$google")"
say "ok: Google sign-in through the emulator: user $google_user"
keys_before="$(kids)"

uid="$(podman exec latchkey-test-first id -u)"
[ "$uid" != 0 ] || fail "the server runs as root"
process_user="$(podman top latchkey-test-first user args | awk 'NR > 1 && /latchkey/ {print $1; exit}')"
[ -n "$process_user" ] && [ "$process_user" != root ] || fail "podman top shows the server as ${process_user:-nobody}"
owner="$(podman exec latchkey-test-first stat -c %u /var/lib/latchkey/latchkey.sqlite)"
[ "$owner" = "$uid" ] || fail "the database belongs to uid $owner"
say "ok: the server runs as uid $uid ($process_user), and its database in the volume is that user's"

podman healthcheck run latchkey-test-first >/dev/null || fail "the HEALTHCHECK failed on a healthy server"
[ "$(podman inspect --format '{{.State.Health.Status}}' latchkey-test-first)" = healthy ] || fail "Podman does not record the container healthy"
if unhealthy="$(podman exec latchkey-test-first latchkey healthcheck --port 9 --timeout 1 2>&1)"; then fail "healthcheck passed with nothing on port 9"; fi
say "ok: the HEALTHCHECK passes (podman healthcheck run: healthy), and fails with nothing listening: $unhealthy"

# A sign-in completed just before SIGTERM; then `podman stop` (SIGTERM, SIGKILL after 10 s).
late="$(sign_in google)"
late_user="$(field user.id <<<"$late")"
stop_started=$(date +%s%N)
pm stop -t 10 latchkey-test-first >/dev/null
stop_ms=$((($(date +%s%N) - stop_started) / 1000000))
exit_code="$(podman inspect --format '{{.State.ExitCode}}' latchkey-test-first)"
[ "$exit_code" = 0 ] || fail "after SIGTERM the server exited $exit_code (137: killed after the 10 s)"
[ "$stop_ms" -lt 10000 ] || fail "SIGTERM took $stop_ms ms"
say "ok: SIGTERM stopped the server in $stop_ms ms, exit 0"

# --- A new container on the same volume.
pm rm latchkey-test-first >/dev/null
start_container latchkey-test-second
keys_after="$(kids)"
[ "$keys_after" = "$keys_before" ] || fail "the signing keys changed across the restart: $keys_before → $keys_after"
say "ok: the signing keys survive the restart (kid $keys_after)"
[ "$(me "$(field accessToken <<<"$apple")" | field id)" = "$apple_user" ] ||
  fail "an access token issued before the restart no longer verifies"
for session in apple google late; do
  old="$(field refreshToken <<<"${!session}")"
  user="$(field user.id <<<"${!session}")"
  rotated="$(refresh "$old")" || fail "the $session session's refresh token did not rotate after the restart"
  [ "$(field refreshToken <<<"$rotated")" != "$old" ] || fail "the refresh token did not change"
  [ "$(me "$(field accessToken <<<"$rotated")" | field id)" = "$user" ] || fail "the $session session's user changed"
done
say "ok: after the restart the sessions' refresh tokens rotate, for the same users (the one signed in just before SIGTERM too: $late_user)"
again="$(sign_in google "$google_sub")"
[ "$(field user.id <<<"$again")" = "$google_user" ] && [ "$(field isNewUser <<<"$again")" = False ] ||
  fail "signing in again with the same Google account made another user"
say "ok: signing in again with the same Google account finds the same user"
pm stop -t 10 latchkey-test-second >/dev/null

size="$(podman image inspect --format '{{.Size}}' "$image")"
say "image $image: $size bytes ($((size / 1000000)) MB), on the debian:bookworm-slim made here"
say "passed in $((SECONDS - started)) s"
