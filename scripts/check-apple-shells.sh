#!/usr/bin/env bash
# Compiles LatchkeyClient's Apple-only files on Linux, against stand-ins of the Apple frameworks they import, in Swift 6
# language mode (complete concurrency checking) with -emit-sil: the data-race diagnostics come from SIL passes, which
# -typecheck never runs. Any warning or error fails the check (exit 1).
#
#   scripts/check-apple-shells.sh                  # every platform below
#   scripts/check-apple-shells.sh ios macos        # some of them
#   LATCHKEY_APPLE_CHECK_ALLOW_WARNINGS=1 …        # count warnings, fail only on errors
#
# Platforms: ios (an app), ios-app-extension (an app extension or widget linking the package, built with
# APPLICATION_EXTENSION_API_ONLY), macos, visionos.
#
# How, and why this way:
# - The stand-ins (scripts/apple-standins/*.swift) declare exactly the symbols the Apple-only files use, with the
#   signatures, actor isolation, Sendable conformances and availability Apple documents, each citing its page. They are
#   compiled here as modules named like the frameworks, so `import AuthenticationServices` finds them and
#   `canImport(AuthenticationServices)`, `canImport(Security)`, `canImport(CryptoKit)` and `canImport(DeviceCheck)` become
#   true without touching the sources.
# - `os(...)`, `targetEnvironment(...)` and `canImport(Darwin)` cannot be made true by a flag, so the whole module
#   (its platform-neutral files too, so that every call between them is checked) is compiled from temporary copies
#   in which each of these conditions on an `#if` / `#elseif` line is renamed to a compilation condition, defined
#   for the platform being checked: os(iOS) becomes LATCHKEY_STANDIN_OS_iOS, and so on; every other os(…), Linux
#   included, is then false, as on an Apple platform. Only `#if` lines change, so line numbers and every
#   declaration stay as written; diagnostics are reported against Sources/LatchkeyClient.
# - For ios-app-extension, what the sources mark `@available(iOSApplicationExtension, unavailable)` (or the
#   visionOS and Mac Catalyst twins) becomes `@available(*, deprecated, message: "unavailable in app extensions")`, and
#   so does UIApplication.shared in the UIKit stand-in: an extension-unsafe call outside such a declaration warns, and
#   fails the check, as it fails an extension's build in Xcode. (Deprecated rather than unavailable: Swift lets one
#   deprecated declaration use another silently, as Xcode lets one extension-unavailable declaration use another;
#   `@available(*, unavailable)` code may not use `@available(*, unavailable)` code.)
# - Availability itself (`@available(iOS 17.4, *)` against a deployment target) is checked by the compiler only when
#   it targets an Apple platform; here it documents. What a platform lacks altogether is left out of its stand-in
#   build instead (excludedCredentials on visionOS), so using it unguarded fails.
# - Foundation, Dispatch and the C library are Linux's (swift-corelibs-foundation), and `canImport(Glibc)` and
#   `canImport(FoundationNetworking)` keep their Linux answers.
# - Warnings do not become errors with -warnings-as-errors: an error during type-checking would stop the compiler
#   before the SIL passes and hide their diagnostics. Every warning is counted, and any fails the check.
# - LatchkeyModels (and what it imports: Crypto, ExtrasBase64) comes from `swift build --target LatchkeyModels`.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=("$@")
if [ ${#platforms[@]} -eq 0 ]; then platforms=(ios ios-app-extension macos visionos); fi

swiftc="${SWIFTC:-swiftc}"
standins="scripts/apple-standins"
work="$(mktemp -d /tmp/latchkey-apple-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT

if ! swift build --target LatchkeyModels >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    exit 1
fi
modules="$(swift build --show-bin-path)/Modules"

# The package's settings for LatchkeyClient (Package.swift `swiftSettings`), in Swift 6 mode.
client_flags=(-swift-version 6 -strict-concurrency=complete -parse-as-library -module-name LatchkeyClient
    -enable-upcoming-feature ExistentialAny -enable-upcoming-feature InternalImportsByDefault
    -enable-upcoming-feature MemberImportVisibility)

failed=0
for platform in "${platforms[@]}"; do
    case "$platform" in
        ios) defines=(-D LATCHKEY_STANDIN_OS_iOS) ui=UIKit ;;
        ios-app-extension) defines=(-D LATCHKEY_STANDIN_OS_iOS -D LATCHKEY_STANDIN_APP_EXTENSION) ui=UIKit ;;
        macos) defines=(-D LATCHKEY_STANDIN_OS_macOS -D LATCHKEY_STANDIN_MACOS) ui=AppKit ;;
        visionos) defines=(-D LATCHKEY_STANDIN_OS_visionOS -D LATCHKEY_STANDIN_VISIONOS) ui=UIKit ;;
        *) echo "check-apple-shells: unknown platform $platform (ios, ios-app-extension, macos, visionos)" >&2; exit 2 ;;
    esac
    defines+=(-D LATCHKEY_STANDIN_DARWIN)
    dir="$work/$platform"
    mkdir -p "$dir/standins" "$dir/sources"
    log="$dir/diagnostics.log"

    # The stand-in frameworks, each a module (AuthenticationServices re-exports the UI framework, as the SDK's does).
    status=0
    for framework in Security "$ui" AuthenticationServices CryptoKit DeviceCheck; do
        "$swiftc" -swift-version 6 -parse-as-library -emit-module -module-name "$framework" "${defines[@]}" \
            -I "$dir/standins" -emit-module-path "$dir/standins/$framework.swiftmodule" \
            "$standins/$framework.swift" >>"$log" 2>&1 || status=$?
    done

    # The module's sources, with the platform conditions renamed (see the header).
    for source in Sources/LatchkeyClient/*.swift; do
        sed -E \
            -e '/^[[:space:]]*#(if|elseif)[[:space:]]/{s/\bos\(([A-Za-z]+)\)/LATCHKEY_STANDIN_OS_\1/g;s/\btargetEnvironment\(([A-Za-z]+)\)/LATCHKEY_STANDIN_TARGET_\1/g;s/\bcanImport\(Darwin\)/LATCHKEY_STANDIN_DARWIN/g}' \
            "$source" >"$dir/sources/$(basename "$source")"
        if [ "$platform" = ios-app-extension ]; then
            sed -i -E 's/@available\((iOS|visionOS|macCatalyst)ApplicationExtension, unavailable\)/@available(*, deprecated, message: "unavailable in app extensions")/g' \
                "$dir/sources/$(basename "$source")"
        fi
    done
    "$swiftc" "${client_flags[@]}" "${defines[@]}" -I "$dir/standins" -I "$modules" -wmo -Onone -emit-sil -o /dev/null \
        "$dir"/sources/*.swift >>"$log" 2>&1 || status=$?

    sed -i -e "s#$dir/sources/#Sources/LatchkeyClient/#g" -e "s#$dir/standins/#$standins/#g" "$log"
    warnings=$(grep -c ": warning: " "$log" || true)
    errors=$(grep -c ": error: " "$log" || true)
    echo "check-apple-shells: $platform: $warnings warnings, $errors errors"
    if [ "$status" -ne 0 ] && [ "$errors" -eq 0 ]; then
        echo "check-apple-shells: $platform: the compiler failed (status $status) without an error line:" >&2
        cat "$log" >&2
        failed=1
    elif [ "$errors" -gt 0 ] || { [ "$warnings" -gt 0 ] && [ -z "${LATCHKEY_APPLE_CHECK_ALLOW_WARNINGS:-}" ]; }; then
        grep -E ": (warning|error): " "$log" | sed "s/^/  /" >&2
        failed=1
    fi
done
exit "$failed"
