#!/usr/bin/env bash
# Contract run: schemathesis (pinned in requirements.txt, from PyPI) against `latchkey serve --dev` and the
# /openapi.json it serves. Every operation, every phase (documented examples, coverage, fuzzing, and stateful
# sequences along the document's links), with real sessions from the dev server's Apple emulator and, for the admin
# API, a real admin key made with `latchkey admin-keys create` on the server's database (hooks.py).
# Fails on any 5xx and on any answer whose status, media type, headers or body the document does not describe.
# (`--include-path-regex '^/'` selects every operation: schemathesis leaves out GET /openapi.json, the
# operation serving the document, unless a filter names it.)
#
#   LATCHKEY_BIN=.build/debug/latchkey tests/contract/run.sh
#
# LATCHKEY_BIN      the latchkey binary (default: the debug build's)
# CONTRACT_EXAMPLES test cases per operation and phase (default 200; about 30 s)
# CONTRACT_SEED     a Hypothesis seed, to replay a run (schemathesis prints the one it used)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${LATCHKEY_BIN:-$(cd "$here/../.." && swift build --show-bin-path)/latchkey}"
if [ ! -x "$bin" ]; then
  echo "contract: $bin is not an executable; build it with: swift build --product latchkey" >&2
  exit 2
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

python3 -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"

work="$(mktemp -d "${TMPDIR:-/tmp}/latchkey-contract.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Three distinct free loopback ports, held open together while they are picked: the server's, the emulator's, and
# one nothing listens on, the webhook endpoint's.
read -r port emulator_port webhook_port < <(python3 - <<'EOF'
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))
for s in sockets:
    s.close()
EOF
)
server="http://127.0.0.1:$port"

# Everything the dev server keeps (database, encryption key, emulator team) goes into the temporary directory.
# Rate limits stay on, high enough that generated traffic is not answered 429 throughout. A webhook endpoint that
# never answers keeps every user's deliveries pending, so the admin API has deliveries to list and retry.
webhook_secret="$(python3 -c 'import base64, os; print("whsec_" + base64.b64encode(os.urandom(32)).decode())')"
settings=(LATCHKEY_DATABASE_URL="$work/latchkey.sqlite" LATCHKEY_WEBHOOKS_0_URL="http://127.0.0.1:$webhook_port/webhooks"
  LATCHKEY_WEBHOOKS_0_SECRET="$webhook_secret" LATCHKEY_ANONYMOUS_ENABLED=true LATCHKEY_ANONYMOUS_PER_IP_PER_HOUR=100000)
(
  cd "$work"
  exec env "${settings[@]}" LATCHKEY_RATE_LIMIT_PER_IP=100000 LATCHKEY_RATE_LIMIT_PER_SUBJECT=1000 \
    LATCHKEY_LOG_LEVEL=warning "$bin" serve --dev --port "$port" --emulator-port "$emulator_port"
) >"$work/server.log" 2>&1 &
server_pid=$!

if ! python3 - "$server/healthz" "http://127.0.0.1:$emulator_port/emulator/requests" <<'EOF'
import sys, time, urllib.request
deadline = time.monotonic() + 60
for url in sys.argv[1:]:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"contract: {url} did not answer within 60 s")
        time.sleep(0.2)
EOF
then
  echo "contract: the server did not start; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
fi

# The admin API answers 404 until a key exists: make one (read-write) on the database the server just created, from
# the same folder and with the same settings; it is printed alone on standard output.
if ! admin_key="$(cd "$work" && env "${settings[@]}" "$bin" admin-keys create --name contract --dev 2>"$work/admin-keys.log")"; then
  echo "contract: latchkey admin-keys create failed:" >&2
  cat "$work/admin-keys.log" >&2
  exit 1
fi
if [[ ! "$admin_key" =~ ^lka_[A-Za-z0-9_-]{43}$ ]]; then
  echo "contract: latchkey admin-keys create printed no admin key" >&2
  exit 1
fi

# The answer checks, plus: schema-violating requests are refused (the document is as strict as the server),
# secured operations refuse missing or bad tokens, and ended sessions stay ended. Left out: positive_data_acceptance
# (a generated identity or refresh token is never valid, so 400/401 are the right answers to schema-valid data) and
# unsupported_method (an undeclared method answers 404 `not_found`, as the document says, not 405).
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
checks+=,negative_data_rejection,missing_required_header,ignored_auth,use_after_free,ensure_resource_availability
seed=()
if [ -n "${CONTRACT_SEED:-}" ]; then seed=(--seed "$CONTRACT_SEED"); fi
status=0
# One worker: with two, Hypothesis describing strategies calls ast.parse from two threads at once, which CPython
# 3.11 does not survive ("SystemError: AST constructor recursion depth mismatch", a tool crash, not a finding).
(
  cd "$work"
  exec env SCHEMATHESIS_HOOKS="$here/hooks.py" LATCHKEY_CONTRACT_SERVER="$server" LATCHKEY_CONTRACT_EMULATOR="http://127.0.0.1:$emulator_port" \
    LATCHKEY_CONTRACT_ADMIN_KEY="$admin_key" \
    python3 -m schemathesis.cli run "$server/openapi.json" --url "$server" \
    --include-path-regex '^/' \
    --phases examples,coverage,fuzzing,stateful \
    --checks "$checks" \
    --max-examples "${CONTRACT_EXAMPLES:-200}" "${seed[@]}" --workers 1 --request-timeout 30 \
    --generation-database none --no-color
) > >(tee "$work/schemathesis.out") || status=$?
sleep 0.2  # let tee drain

if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "contract: the server exited during the run; its log:" >&2
  cat "$work/server.log" >&2
  status=1
elif [ "$status" -ne 0 ]; then
  echo "contract: schemathesis found problems (exit $status); the server's warnings and errors:" >&2
  tail -n 50 "$work/server.log" >&2
fi
# One plain closing line for CI: the cases schemathesis generated, passed and failed.
read -r generated passed < <(sed -nE 's/^ *([0-9]+) generated, ([0-9]+) passed.*/\1 \2/p' "$work/schemathesis.out" | tail -1) || true
if [ -n "${generated:-}" ]; then
  failed=$((generated - passed))
  if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "contract: $passed passed, $failed failed"
fi
exit "$status"
