// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// Test code imports freely; the libraries keep every public import deliberate.
let testSwiftSettings: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "Latchkey",
    // The client SDK and the models run on iOS 17 (they use NSLock, never Mutex or Atomic: a test holds them to it); the
    // server-side modules use Mutex and Atomic, which macOS has from 15.
    platforms: [.macOS(.v15), .iOS(.v17)],
    products: [
        .library(name: "LatchkeyModels", targets: ["LatchkeyModels"]),
        .library(name: "LatchkeyJOSE", targets: ["LatchkeyJOSE"]),
        .library(name: "LatchkeyWebAuthn", targets: ["LatchkeyWebAuthn"]),
        .library(name: "LatchkeyCore", targets: ["LatchkeyCore"]),
        .library(name: "LatchkeyProviders", targets: ["LatchkeyProviders"]),
        .library(name: "LatchkeyEmulator", targets: ["LatchkeyEmulator"]),
        .library(name: "LatchkeyStore", targets: ["LatchkeyStore"]),
        .library(name: "LatchkeyServer", targets: ["LatchkeyServer"]),
        .library(name: "LatchkeyClient", targets: ["LatchkeyClient"]),
        .library(name: "LatchkeyBackend", targets: ["LatchkeyBackend"]),
        .library(name: "LatchkeyBackendHummingbird", targets: ["LatchkeyBackendHummingbird"]),
        .executable(name: "latchkey", targets: ["latchkey"]),
        .executable(name: "latchkey-bench", targets: ["latchkey-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.0.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-extras/swift-extras-base64.git", from: "1.2.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/vapor/sql-kit.git", from: "3.36.0"),
        .package(url: "https://github.com/vapor/sqlite-kit.git", from: "4.5.0"),
        .package(url: "https://github.com/vapor/postgres-kit.git", from: "2.17.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.0"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.4.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.0"),
        // `latchkey users import`: gzip'd Auth0 exports and Firebase's CSV exports.
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/swiftcsv/SwiftCSV.git", from: "0.10.0"),
        // `swift package generate-documentation`: the DocC catalogs of LatchkeyClient and LatchkeyBackend.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
        // LatchkeyMail's SMTP client (e-mailed sign-in codes); both already come in through async-http-client.
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        // LatchkeyMailTests' self-signed certificate for a real STARTTLS handshake; already in the graph.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.0"),
        // App Attest's DER: the verifier reads the leaf's nonce extension, the emulator writes it; swift-certificates brings it.
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.0"),
        // Traces: spans in the libraries through swift-distributed-tracing, exported by `latchkey serve` over OTLP/HTTP
        // (swift-otel without its gRPC exporter).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.0"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        .target(
            name: "LatchkeyModels",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
            ],
            swiftSettings: swiftSettings
        ),
        // Signed tokens and what checking them needs: JOSE, the lean JSON code, the outbound HTTP transport and the JWKS
        // cache. An app's backend links this and the models, nothing of the server.
        .target(
            name: "LatchkeyJOSE",
            dependencies: [
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // Passkeys' wire formats and the relying party's checks: CBOR, COSE keys, attestation and assertion; and Apple's
        // App Attest (attestations and assertions of an app's key).
        .target(
            name: "LatchkeyWebAuthn",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyJOSE",
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA public keys from their modulus and exponent (COSE keys of passkeys).
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                // App Attest's certificate chain, up to Apple's App Attestation Root CA.
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyCore",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyJOSE",
                "LatchkeyWebAuthn",
                "CSystemRandom",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyProviders",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyJOSE",
                "LatchkeyCore",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                // A provider module reads its own settings.
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: swiftSettings
        ),
        // For the app's own Swift server: verifies Latchkey's access tokens and webhooks, nothing of the server.
        .target(
            name: "LatchkeyBackend",
            dependencies: ["LatchkeyModels", "LatchkeyJOSE"],
            swiftSettings: swiftSettings
        ),
        // The same in a Hummingbird server: an authenticator middleware (hummingbird-auth).
        .target(
            name: "LatchkeyBackendHummingbird",
            dependencies: [
                "LatchkeyBackend",
                "LatchkeyJOSE",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyStore",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyCore",
                "LatchkeyJOSE",
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "SQLiteKit", package: "sqlite-kit"),
                .product(name: "PostgresKit", package: "postgres-kit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyServer",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyCore",
                "LatchkeyJOSE",
                "LatchkeyProviders",
                "LatchkeyStore",
                "LatchkeyMail",
                "LatchkeyWebAuthn",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["EmbedOpenAPI"]
        ),
        // openapi.yaml compiled into LatchkeyServer as a string: a resource bundle would have to stay beside every binary
        // that links the server, and Bundle.module stops the process where it is missing.
        .plugin(name: "EmbedOpenAPI", capability: .buildTool(), dependencies: ["embed-text"]),
        .executableTarget(name: "embed-text", swiftSettings: swiftSettings),
        .target(name: "LatchkeyClient", dependencies: ["LatchkeyModels"], swiftSettings: swiftSettings),
        .target(
            name: "LatchkeyEmulator",
            dependencies: [
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                // The App Attest stand-in's certificate chain.
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        // Sign-in codes by e-mail: an SMTP client on SwiftNIO (STARTTLS or implicit TLS, AUTH PLAIN or LOGIN). No Latchkey module.
        .target(
            name: "LatchkeyMail",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(name: "CMallocTuning"),
        .target(name: "CSystemRandom"),
        // The client SDK in a process of its own, for tests and `latchkey-bench`: URLSession stays out of the server.
        .executableTarget(
            name: "latchkey-sdk-probe",
            dependencies: [
                "LatchkeyClient",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "latchkey",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyCore",
                "LatchkeyJOSE",
                "LatchkeyProviders",
                "LatchkeyEmulator",
                "LatchkeyStore",
                "LatchkeyServer",
                "LatchkeyBackend",
                "LatchkeyImport",
                "LatchkeyWebAuthn",
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                "CMallocTuning",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // The benchmarks, outside the shipped `latchkey`: they start the `latchkey` built beside them as their server.
        .executableTarget(
            name: "latchkey-bench",
            dependencies: [
                "LatchkeyCore",
                "LatchkeyModels",
                "LatchkeyJOSE",
                "LatchkeyWebAuthn",
                "LatchkeyProviders",
                "LatchkeyEmulator",
                "LatchkeyBenchReport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // A benchmark row and its units, apart so that its test builds without the harness.
        .target(name: "LatchkeyBenchReport", swiftSettings: swiftSettings),
        // Users a team already has, read from Firebase, Supabase, Auth0 and Cognito exports, and imported into the store.
        .target(
            name: "LatchkeyImport",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyJOSE",
                "LatchkeyCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "SwiftCSV", package: "SwiftCSV"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "LatchkeyImportTests",
            dependencies: ["LatchkeyImport", "LatchkeyTestSupport", .product(name: "PostgresNIO", package: "postgres-nio")],
            resources: [.copy("Fixtures")],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyMailTests",
            dependencies: [
                "LatchkeyMail",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: testSwiftSettings
        ),
        // App Attest against published attestations and assertions of real devices (Fixtures/appattest/SOURCES.md).
        .testTarget(
            name: "LatchkeyWebAuthnTests",
            dependencies: [
                "LatchkeyWebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                // The nonce extension of the tests' own App Attest certificates.
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            path: "Tests/LatchkeyWebAuthnTests",
            resources: [.copy("Fixtures")],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(name: "LatchkeyBenchReportTests", dependencies: ["LatchkeyBenchReport"], swiftSettings: testSwiftSettings),
        .testTarget(name: "LatchkeyModelsTests", dependencies: ["LatchkeyModels"], swiftSettings: swiftSettings),
        // LatchkeyJOSE checks the client's DPoP proofs as the server does; Crypto recomputes App Attest's client data hash.
        .testTarget(
            name: "LatchkeyClientTests",
            dependencies: ["LatchkeyClient", "LatchkeyTestSupport", "LatchkeyJOSE", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: testSwiftSettings
        ),
        .target(
            name: "LatchkeyTestSupport",
            dependencies: [
                "LatchkeyJOSE",
                "LatchkeyWebAuthn",
                "LatchkeyCore",
                "LatchkeyClient",
                "LatchkeyProviders",
                "LatchkeyEmulator",
                "LatchkeyStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            path: "Tests/LatchkeyTestSupport",
            resources: [.copy("Fixtures")],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyEmulatorTests",
            dependencies: [
                "LatchkeyEmulator", "LatchkeyProviders", "LatchkeyTestSupport", "LatchkeyWebAuthn",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyStoreTests",
            dependencies: [
                "LatchkeyStore", "LatchkeyTestSupport",
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyServerTests",
            dependencies: [
                "LatchkeyServer", "LatchkeyEmulator", "LatchkeyTestSupport", "LatchkeyClient", "LatchkeyBackend", "LatchkeyBackendHummingbird",
                "LatchkeyImport",
                // DocumentationExamplesTests compiles LatchkeyMail's documented examples.
                "LatchkeyMail",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyCLITests",
            dependencies: [
                "LatchkeyStore", "LatchkeyEmulator", "LatchkeyProviders", "LatchkeyTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "SQLiteKit", package: "sqlite-kit"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyCoreTests",
            dependencies: [
                "LatchkeyCore", "LatchkeyJOSE", "LatchkeyWebAuthn", "LatchkeyTestSupport", .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "LatchkeyProvidersTests",
            dependencies: [
                "LatchkeyProviders", "LatchkeyTestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
    ]
)
