import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The attacks of issue 20 item 8 ("names people see are what they seem"), over a real socket:
/// names that look like another device's, or like nothing, or that flood a screen with marks.
@Suite("Names people see, checked over a real socket", .timeLimit(.minutes(10)))
struct NameRuleSocketTests {
    /// Hostile names a client can send, and a phrase of the server's answer to each.
    static let hostileNames: [(name: String, phrase: String)] = [
        ("alice-l\u{430}ptop", "mixes the Latin and Cyrillic scripts (U+0430 CYRILLIC SMALL LETTER A)"),
        (
            String(repeating: "a" + String(repeating: "\u{301}\u{300}\u{302}\u{303}", count: 300), count: 16),
            "is longer than 256 bytes"
        ),
        ("a\u{301}\u{300}\u{302}\u{303}\u{304}", "more than 4 combining marks"),
        ("\u{3164}", "invisible character, U+3164 HANGUL FILLER"),
        ("\u{2800}\u{2800}", "invisible character, U+2800 BRAILLE PATTERN BLANK"),
        ("laptop\u{202E}pot", "invisible character, U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("\u{1D41A}lice-laptop", "compatibility form"),
    ]

    @Test("registration refuses confusable, blank and flooding names with 400 and stores a name in NFC")
    func registration() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 1000 }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let key = try ServerTestKeys.key("alice-1")
        for (name, phrase) in Self.hostileNames {
            let response = try api.register(user: "alice", key: key, name: name)
            #expect(response.status == 400, "\(phrase)")
            #expect(response.errorCode == "invalid_request")
            let description = response.errorDescription ?? ""
            #expect(description.contains(phrase), "\(description)")
            #expect(description.utf8.count < 200)
        }
        #expect(try runner.storage.device(kid: key.publicKey.fingerprint) == nil)

        let accepted = try api.register(user: "alice", key: key, name: "Cafe\u{301} laptop")
        #expect(accepted.status == 201)
        let nfc = Array("Caf\u{E9} laptop".unicodeScalars)
        #expect(accepted.json?["name"]?.stringValue.map { Array($0.unicodeScalars) } == nfc)
        let stored = try #require(try runner.storage.device(kid: key.publicKey.fingerprint))
        #expect(Array(stored.name.unicodeScalars) == nfc)
    }

    @Test("bc-authorize refuses such binding messages with 400 invalid_binding_message and lists one in NFC")
    func bindingMessages() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.failureLimit = 1000 }
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let client = try api.addClient()
        // The 38 KB name would be 115 KB percent-encoded, over the body limit: a flood of 1 KB.
        let flood = String(repeating: "a" + String(repeating: "\u{301}\u{300}", count: 16), count: 16)
        let messages =
            Self.hostileNames.filter { $0.name.utf8.count < 1000 } + [
                (flood, "is longer than 128 bytes"), ("AB\u{2800}12", "U+2800"),
                ("12\u{665}", "different number systems"),
            ]
        for (message, phrase) in messages {
            let response = try api.backchannelAuthorize(client, user: "alice", extra: [("binding_message", message)])
            #expect(response.status == 400, "\(phrase)")
            #expect(response.errorCode == "invalid_binding_message")
            #expect(response.errorDescription?.contains(phrase) == true, "\(response.errorDescription ?? "")")
        }
        #expect(try api.openRequests(token: token).json?["requests"]?.arrayValue?.isEmpty == true)

        let id = try api.startSignIn(client, user: "alice", bindingMessage: "Cafe\u{301} 42")
        #expect(try Array(api.code(of: id).unicodeScalars) == Array("Caf\u{E9} 42".unicodeScalars))
    }

    @Test("a client application's name follows the same rule and is stored in NFC")
    func clientNames() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        let registry = ClientRegistry(storage: storage, now: environment.clock.closure)
        let error = #expect(throws: ServerConfigurationError.self) { try registry.add(name: "Supp\u{43E}rt desk") }
        #expect(error?.message.contains("mixes the Latin and Cyrillic scripts") == true)
        let (client, _) = try registry.add(name: "Re\u{301}ception")
        #expect(Array(client.name.unicodeScalars) == Array("R\u{E9}ception".unicodeScalars))
    }
}
