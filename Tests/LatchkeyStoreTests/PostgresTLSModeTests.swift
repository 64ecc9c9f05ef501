import Foundation
import LatchkeyCore
import LatchkeyJOSE
import PostgresNIO
import Testing

@testable import LatchkeyStore

@Suite("Store: PostgreSQL TLS settings")
struct PostgresTLSModeTests {
    @Test("sslmode and sslrootcert keep libpq's meanings; an unknown mode or a missing CA file is refused before connecting")
    func postgresTLSModes() async throws {
        let caFile = NSTemporaryDirectory() + "latchkey-ca-\(UUID().uuidString).pem"
        try Data("-----BEGIN CERTIFICATE-----\n".utf8).write(to: URL(fileURLWithPath: caFile))
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        for (mode, root, use, verification) in [
            (nil, nil, .never, .none), ("disable", nil, .never, .none), ("allow", nil, .whenOffered, .none), ("prefer", nil, .whenOffered, .none),
            ("require", nil, .always, .none), ("require", caFile, .always, .noHostnameVerification),
            ("verify-ca", nil, .always, .noHostnameVerification), ("verify-full", caFile, .always, .fullVerification),
        ] as [(String?, String?, PostgresTLSMode.Use, CertificateVerification)] {
            let tls = try PostgresTLSMode(sslMode: mode, rootCertificateFile: root)
            #expect(tls.use == use && tls.verification == verification && tls.rootCertificateFile == root, "\(mode ?? "none") \(root ?? "")")
        }
        for url in ["postgres://u@127.0.0.1:1/x?sslmode=on", "postgres://u@127.0.0.1:1/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"] {
            await #expect(throws: LatchkeyError(.invalidConfiguration, "")) { try await SQLAuthStore.open(.postgres(url: url)) }
        }
    }
}
