#!/usr/bin/env bash
# Builds the DocC archives of LatchkeyClient and LatchkeyBackend (swift-docc-plugin) and fails on any documentation
# warning: `--warnings-as-errors` is passed through to `docc convert`, which then exits non-zero, and the plugin with it.
# Builds in .build-docs (or $LATCHKEY_DOCS_SCRATCH: CI reuses .build), apart from .build, so it neither waits for nor
# invalidates another build.
# On Linux DocC sees only what compiles there: KeychainTokenStore and signInWithWebSheet(…) are left out.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch="${LATCHKEY_DOCS_SCRATCH:-.build-docs}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
archives=()
failed=()

for target in LatchkeyClient LatchkeyBackend; do
  echo "== $target"
  if ! swift package --scratch-path "$scratch" generate-documentation --target "$target" --warnings-as-errors 2>&1 | tee "$log"; then
    echo "docs.sh: $target: the documentation build failed (a documentation warning counts as an error)" >&2
    failed+=("$target")
    continue
  fi
  # Belt and braces: a docc warning that did not fail the build (docc prints "warning: …", then "--> file:line") still
  # fails this script. Only docc's part of the output counts: SwiftPM's notes on dependencies are not about the docs.
  if sed -n '/^Building documentation for /,$p' "$log" | grep -E '^warning: ' >/dev/null; then
    echo "docs.sh: $target: documentation warnings (above)" >&2
    failed+=("$target")
    continue
  fi
  # The plugin prints the archive's path on the line after "Generated documentation archive at:".
  archive=$(grep -A1 'Generated documentation archive at:' "$log" | tail -1 | sed 's/^[[:space:]]*//')
  archives+=("${archive:-$scratch/plugins/Swift-DocC/outputs/$target.doccarchive}")
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "docs.sh: failed: ${failed[*]}" >&2
  exit 1
fi

echo
echo "Documentation archives (no warnings):"
for archive in "${archives[@]}"; do echo "  $archive"; done
