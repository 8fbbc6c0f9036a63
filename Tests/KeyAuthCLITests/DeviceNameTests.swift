import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

@Suite("Device names in the keyauth command", .serialized, .timeLimit(.minutes(10)))
struct DeviceNameTests {
    @Test("the built binary refuses a confusable --name before making a key, and registers an NFD one in NFC")
    func registerWithTheBinary() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let refused = try machine.register(server, user: "alice", extra: ["--name", "alice-l\u{430}ptop"])
            #expect(refused.status == 64)
            expectOneErrorLine(refused)
            #expect(refused.standardError.contains("--name mixes the Latin and Cyrillic scripts (U+0430"))
            #expect(machine.accounts.accountNames().isEmpty)

            let registered = try machine.register(server, user: "alice", extra: ["--name", "Cafe\u{301}"])
            #expect(registered.status == 0, "\(registered.standardError)")
            let list = try machine.run(["devices", "list", "--json"])
            let device = try #require(try JSONValue(parsing: list.standardOutput)["devices"]?.arrayValue?.first)
            #expect(device["name"]?.stringValue.map { Array($0.unicodeScalars) } == ["C", "a", "f", "\u{E9}"])
        }
    }

    @Test("a host name becomes the default device name when the rule accepts it, else a neutral one")
    func defaultName() {
        #expect(RegisterCommand.deviceName(fromHost: "build-07.example.com") == "build-07.example.com")
        #expect(RegisterCommand.deviceName(fromHost: "localhost") == "localhost")
        #expect(RegisterCommand.deviceName(fromHost: "") == "keyauth-device")
        #expect(RegisterCommand.deviceName(fromHost: "host\u{200B}name") == "keyauth-device")
        #expect(RegisterCommand.deviceName(fromHost: String(repeating: "h", count: 65)) == "keyauth-device")
    }

    @Test("text from the server is shown without bidirectional overrides, invisible characters or mark floods")
    func printable() {
        #expect(Formatting.printable("laptop\u{202E}pot\u{200B}") == "laptop?pot?")
        #expect(Formatting.printable("a\u{1B}[2J\u{7}") == "a?[2J?")
        #expect(Formatting.printable("a" + String(repeating: "\u{301}", count: 500)) == "a\u{301}\u{301}\u{301}\u{301}")
        #expect(Formatting.printable("Caf\u{E9} \u{6771}\u{4EAC}") == "Caf\u{E9} \u{6771}\u{4EAC}")
    }
}
