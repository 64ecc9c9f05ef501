import LatchkeyImport
import Testing

@Suite struct SourceUserTests {
    @Test func importSourcesAreTheCommandsNames() {
        #expect(ImportSource.allCases.map(\.rawValue) == ["firebase", "supabase", "auth0", "cognito"])
    }
}
