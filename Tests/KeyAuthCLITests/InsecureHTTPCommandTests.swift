import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An IPv4 address of this machine outside 127.0.0.0/8, to run a server on a host that is not
/// loopback as far as the client can tell; nil on a machine with loopback only.
private let nonLoopbackAddress: String? = {
    var list: UnsafeMutablePointer<ifaddrs>? = nil
    guard getifaddrs(&list) == 0 else { return nil }
    defer { freeifaddrs(list) }
    var entry = list
    while let current = entry {
        defer { entry = current.pointee.ifa_next }
        guard let address = current.pointee.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET),
            current.pointee.ifa_flags & UInt32(IFF_UP) != 0
        else { continue }
        var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        let converted = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { ipv4 in
            var bits = ipv4.pointee.sin_addr
            return inet_ntop(AF_INET, &bits, &text, socklen_t(text.count)) != nil
        }
        let value = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if converted, !KeyAuthClient.isLoopbackHost(value) { return value }
    }
    return nil
}()

@Suite("Plain http off loopback needs --insecure-http", .timeLimit(.minutes(10)))
struct InsecureHTTPCommandTests {
    @Test("register refuses http:// to a host that is not loopback, names --insecure-http, and sends nothing")
    func registerRefusesPlainHTTP() async throws {
        let harness = CommandHarness()
        defer { harness.home.remove() }
        let result = await harness.registerUnattended("http://auth.example.com")
        #expect(result.status == 64)
        #expect(result.errorLines.count == 1)
        #expect(result.standardError.contains("--insecure-http"))
        #expect(harness.accounts.accountNames().isEmpty)
    }

    @Test(
        "with --insecure-http the account remembers it, later commands reach the server, and without it they stop",
        .enabled(if: nonLoopbackAddress != nil, "the machine has no address outside 127.0.0.0/8"))
    func insecureHTTPIsRemembered() async throws {
        let address = try #require(nonLoopbackAddress)
        let server = try InProcessKeyAuthServer(host: address)
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        let refused = await harness.registerUnattended(server.url)
        #expect(refused.status == 64)
        #expect(server.requests.isEmpty)

        let registered = await harness.registerUnattended(server.url, extra: ["--insecure-http"])
        #expect(registered.status == 0, "\(registered.standardError)")
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        #expect(try harness.accounts.load(name).insecureHTTP)
        let file = try harness.accounts.accountFile(for: name)
        let stored = try JSONValue(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: file))))
        #expect(stored["insecure_http"] == .bool(true))

        let login = await harness.run(["login"])
        #expect(login.status == 0, "\(login.standardError)")
        let status = await harness.run(["status"])
        #expect(status.standardOutput.contains("plain HTTP allowed by --insecure-http"))

        // An account file without the flag (written before it existed) is refused before any request.
        var account = try harness.accounts.load(name)
        account.insecureHTTP = false
        try harness.accounts.save(account)
        let before = server.requests.count
        let stopped = await harness.run(["login"])
        #expect(stopped.status == 1)
        #expect(stopped.standardError.contains("--insecure-http"))
        #expect(server.requests.count == before)
    }

    @Test("--insecure-http is not remembered where it is not needed")
    func notRememberedForLoopback() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        let result = await harness.registerUnattended(server.url, extra: ["--insecure-http"])
        #expect(result.status == 0, "\(result.standardError)")
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        #expect(try !harness.accounts.load(name).insecureHTTP)
        let file = try harness.accounts.accountFile(for: name)
        #expect(!(try String(contentsOfFile: file, encoding: .utf8)).contains("insecure_http"))
    }

    @Test("an account file with an insecure_http that is not a boolean is corrupt")
    func corruptFlag() throws {
        let object: JSONValue = .object([
            "name": "a", "server": "http://h", "issuer": "http://h", "user": "u", "device_name": "d",
            "presence": "none", "status": "active", "insecure_http": "yes",
        ])
        let error = #expect(throws: KeyAuthError.self) { try KeyAuthAccount(jsonValue: object) }
        #expect(error?.code == .accountCorrupt)
        #expect(error?.message.contains("insecure_http") == true)
    }
}
