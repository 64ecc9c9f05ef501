import Foundation
import Testing

@testable import LatchkeyStore

@Suite("Identity claims read from their stored document")
struct IdentityClaimsTests {
    @Test(
        "read as Foundation's JSONDecoder reads [String: String], whatever the document",
        arguments: [
            #"{}"#,
            #"{"azp":"com.example.app","hd":"example.com","iss":"https://accounts.google.com"}"#,
            #"{"esc":"\" \\ \/ \n \u00e9 \ud83d\ude00","ünï":"cødé ✓"}"#,
            // A member named twice: the strict parser refuses it, Foundation keeps one.
            #"{"a":"1","a":"1"}"#,
            // Not an object of strings: no claims at all, as before.
            #"{"a":"1","n":2}"#, #"{"a":null}"#, #"{"a":{"b":"c"}}"#, #"["a"]"#, #""a""#, #"{"a":"1""#, "",
        ])
    func matchesFoundation(document: String) {
        let foundation = (try? JSONDecoder().decode([String: String].self, from: Data(document.utf8))) ?? [:]
        #expect(SQLAuthStore.stringClaims(document) == foundation)
    }

    @Test("a stored document's claims come back as written")
    func known() {
        #expect(SQLAuthStore.stringClaims(#"{"hd":"example.com","tid":"tenant"}"#) == ["hd": "example.com", "tid": "tenant"])
        #expect(SQLAuthStore.stringClaims(#"{"a":"1","a":"1"}"#) == ["a": "1"])
        #expect(SQLAuthStore.stringClaims(#"{"a":"1","n":2}"#).isEmpty)
    }
}
