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
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "LatchkeyModels", targets: ["LatchkeyModels"]),
        .library(name: "LatchkeyCore", targets: ["LatchkeyCore"]),
        .library(name: "LatchkeyProviders", targets: ["LatchkeyProviders"]),
        .library(name: "LatchkeyEmulator", targets: ["LatchkeyEmulator"]),
        .executable(name: "latchkey", targets: ["latchkey"]),
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
        .target(
            name: "LatchkeyCore",
            dependencies: [
                "LatchkeyModels",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyProviders",
            dependencies: [
                "LatchkeyCore",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "LatchkeyEmulator",
            dependencies: [
                "LatchkeyModels",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "latchkey",
            dependencies: [
                "LatchkeyModels",
                "LatchkeyCore",
                "LatchkeyProviders",
                "LatchkeyEmulator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "LatchkeyModelsTests", dependencies: ["LatchkeyModels"], swiftSettings: swiftSettings),
        .target(
            name: "LatchkeyTestSupport",
            dependencies: [
                "LatchkeyCore",
                "LatchkeyProviders",
                "LatchkeyEmulator",
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
                "LatchkeyEmulator", "LatchkeyProviders", "LatchkeyTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(name: "LatchkeyCoreTests", dependencies: ["LatchkeyCore", "LatchkeyTestSupport"], swiftSettings: testSwiftSettings),
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
