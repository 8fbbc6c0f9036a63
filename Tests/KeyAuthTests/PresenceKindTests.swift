import Foundation
import KeyAuth
import Testing

@Suite("Presence opt-out and kinds")
struct PresenceKindTests {
    @Test("no presence check is always available and never asks")
    func noPresence() async throws {
        let presence = NoPresence()
        #expect(presence.kind == .none)
        #expect(presence.isAvailable())
        try await presence.verifyPresence(reason: "anything")
    }

    @Test("presence kinds encode as their stable names")
    func kindsEncode() throws {
        let kinds: [PresenceKind] = [.pin, .pam, .none]
        let data = try JSONEncoder().encode(kinds)
        #expect(String(decoding: data, as: UTF8.self) == #"["pin","pam","none"]"#)
        #expect(try JSONDecoder().decode([PresenceKind].self, from: data) == kinds)
    }
}
