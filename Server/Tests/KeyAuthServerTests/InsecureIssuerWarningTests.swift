import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `serve` and `check-config` warn about a plain `http` issuer that other machines can use.
@Suite("The warning for an http issuer")
struct InsecureIssuerWarningTests {
    @Test(
        "http to a host other machines use warns; https, and http on loopback alone, do not",
        arguments: [
            (["--listen", "0.0.0.0:8088", "--issuer", "http://auth.example.com"], true),
            (["--listen", "127.0.0.1:8088", "--issuer", "http://auth.example.com"], true),
            (["--listen", "0.0.0.0:8088"], true),
            (["--listen", "127.0.0.1:8088", "--issuer", "http://[::1]:8088"], false),
            (["--listen", "127.0.0.1:8088", "--issuer", "http://localhost:8088"], false),
            (["--listen", "127.0.0.1:8088"], false),
            (["--listen", "0.0.0.0:8088", "--issuer", "https://auth.example.com"], false),
            (["--listen", "127.0.0.1:8088", "--issuer", "https://auth.example.com", "--trust-proxy"], false),
        ])
    func warns(_ arguments: [String], _ warns: Bool) throws {
        guard
            case .serve(let configuration) = try ServerCommand.parse(arguments: ["serve"] + arguments, environment: [:])
        else { throw TestFailure("not serve") }
        #expect((configuration.insecureIssuerWarning != nil) == warns, "\(arguments)")
        let report = ServerCommand.checkConfigReport(configuration, origins: [:], settingsFile: nil)
        #expect(report.contains("is plain http") == warns)
    }

    @Test("an SSH CA key handed over as a systemd credential warns: rotation and retirement never reach it")
    func sshCACredential() throws {
        guard
            case .serve(let configuration) = try ServerCommand.parse(
                arguments: ["serve", "--ssh-ca-key-file", "/run/credentials/keyauth-server.service/ssh-ca"],
                environment: [:])
        else { throw TestFailure("not serve") }
        let warning = try #require(
            configuration.sshCACredentialWarning(credentialsDirectory: "/run/credentials/keyauth-server.service"))
        #expect(warning.contains("stays out of the revocation list"))
        #expect(configuration.sshCACredentialWarning(credentialsDirectory: "/run/credentials/other.service") == nil)
        #expect(configuration.sshCACredentialWarning(credentialsDirectory: nil) == nil)
        guard
            case .serve(let ownPath) = try ServerCommand.parse(
                arguments: ["serve", "--ssh-ca-key-file", "/var/lib/keyauth/ssh-ca.pem"], environment: [:])
        else { throw TestFailure("not serve") }
        #expect(ownPath.sshCACredentialWarning(credentialsDirectory: "/run/credentials/keyauth-server.service") == nil)
    }

    @Test("the warning names a section of SERVER.md that exists")
    func pointsToSection() throws {
        guard
            case .serve(let configuration) = try ServerCommand.parse(
                arguments: ["serve", "--listen", "0.0.0.0:8088"], environment: [:])
        else { throw TestFailure("not serve") }
        let warning = try #require(configuration.insecureIssuerWarning)
        #expect(warning.hasSuffix("(docs/SERVER.md, \"Deployment behind a TLS reverse proxy\")"), "\(warning)")
        let guide = try String(
            contentsOf: Vectors.packageRoot.appendingPathComponent("docs/SERVER.md"), encoding: .utf8)
        #expect(guide.components(separatedBy: "\n").contains("### \(ServerConfiguration.tlsSection)"))
    }
}
