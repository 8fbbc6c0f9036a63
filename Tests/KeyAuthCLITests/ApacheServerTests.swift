import Foundation
import KeyAuthTestSupport
import Testing

@Suite("The Apache harness of the relying-party tests", .serialized, .timeLimit(.minutes(15)))
struct ApacheServerTests {
    @Test(
        "Apache starts from the repository's mod_auth_openidc configuration and serves the site; the protected page needs the provider",
        .enabled(
            if: ExternalTools.shouldRun(installed: ApacheRelyingParty.isInstalled),
            "apache2 or libapache2-mod-auth-openidc is not installed"))
    func servesTheSite() throws {
        let unreachable = ClosedPort()
        let apache = try ApacheServer(
            port: ApacheServer.freePort(), modules: ApacheRelyingParty.modules,
            defines: [
                "KEYAUTH_ISSUER": "http://127.0.0.1:\(unreachable.port)", "APP_URL": "http://localhost:1",
                "KEYAUTH_CLIENT_ID": "client", "KEYAUTH_CLIENT_SECRET": "secret",
                "OIDC_CRYPTO_PASSPHRASE": "passphrase",
            ],
            site: "Include \(ApacheRelyingParty.configurationFile)", documents: ["index.html": "hello from Apache\n"])
        let open = try fetch(apache.url + "/index.html")
        #expect(open.status == 200)
        #expect(open.body == "hello from Apache\n")
        // The module cannot reach the provider's discovery document: an error, never the page.
        let protected = try fetch(apache.url + "/protected/")
        #expect(protected.status == 500, "\(apache.diagnostics)")
        #expect(
            apache.diagnostics.contains("could not retrieve metadata from url: http://127.0.0.1:\(unreachable.port)"))
    }

    @Test(
        "a configuration Apache refuses fails the start with Apache's own message",
        .enabled(
            if: ExternalTools.shouldRun(installed: ApacheServer.isInstalled(modules: [])), "apache2 is not installed"))
    func refusedConfigurationFailsLoudly() throws {
        #expect {
            _ = try ApacheServer(port: ApacheServer.freePort(), modules: [], site: "NoSuchDirective on")
        } throws: { error in
            "\(error)".contains("Invalid command 'NoSuchDirective'")
        }
    }

    /// One GET with curl, which the machine has: the status and the body.
    private func fetch(_ url: String) throws -> (status: Int, body: String) {
        let result = try runProcess(
            "/usr/bin/curl", ["-s", "-o", "-", "-w", "\n%{http_code}", url], environment: ["PATH": "/usr/bin:/bin"],
            timeout: 30)
        var lines = result.standardOutput.components(separatedBy: "\n")
        let status = Int(lines.removeLast()) ?? 0
        return (status, lines.joined(separator: "\n"))
    }
}
