#!/usr/bin/env bash
# Generates the test-only keys under Tests/LatchkeyTestSupport/Fixtures. They sign nothing outside tests; rerun to replace them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=Tests/LatchkeyTestSupport/Fixtures
mkdir -p "$out"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$out/apple-rs256.pem" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$out/attacker-rs256.pem" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$out/AuthKey_TESTKEY123.p8" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$out/p384.p8" 2>/dev/null
openssl pkey -in "$out/AuthKey_TESTKEY123.p8" -pubout -out "$out/AuthKey_TESTKEY123.pub.pem" 2>/dev/null
echo "fixtures written to $out"
