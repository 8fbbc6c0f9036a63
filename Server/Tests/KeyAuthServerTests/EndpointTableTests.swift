import Foundation
import Testing

@testable import KeyAuthServer

/// PROTOCOL.md's endpoint table and the server's route declarations name the same endpoints:
/// a route added to one and not the other fails here.
@Suite("The protocol's endpoint table matches the declared routes")
struct EndpointTableTests {
    /// Each `METHOD[, METHOD] /path` in the first column of section 4's table, query left out.
    private func documentedEndpoints() throws -> Set<String> {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        let header = "| method and path | purpose | success |\n|---|---|---|\n"
        let start = try #require(text.range(of: header), "PROTOCOL.md has no endpoint table")
        let table = text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false)
            .prefix { $0.hasPrefix("|") }
        let endpoint = #/`((?:[A-Z]+, )*[A-Z]+) (/[^`?\s]*)[^`]*`/#
        var found: Set<String> = []
        for row in table {
            let firstCell = row.dropFirst().prefix { $0 != "|" }
            for match in firstCell.matches(of: endpoint) {
                for method in match.output.1.split(separator: ", ") { found.insert("\(method) \(match.output.2)") }
            }
        }
        return found
    }

    /// Each declared method and pattern (catch-alls name no endpoint and are not listed).
    private func declaredEndpoints() -> Set<String> {
        var declared: Set<String> = []
        for endpoint in KeyAuthResponder.routes.endpoints {
            for method in endpoint.methods { declared.insert("\(method.rawValue) \(endpoint.pattern)") }
        }
        return declared
    }

    @Test("every declared route is in the table, and every row of the table is declared")
    func tableAndRoutesAgree() throws {
        let documented = try documentedEndpoints()
        let declared = declaredEndpoints()
        #expect(declared.contains("POST /oauth/token") && documented.contains("DELETE /v1/devices/{kid}"))
        #expect(declared.subtracting(documented).sorted() == [], "declared but not in PROTOCOL.md's table")
        #expect(documented.subtracting(declared).sorted() == [], "in PROTOCOL.md's table but not declared")
    }

    @Test("a catch-all's label is its own, and no catch-all hides a declared path")
    func catchAllsComeAfterTheirFeature() {
        #expect(KeyAuthResponder.routes.label(for: "/account/nothing/here") == "/account/{unknown}")
        #expect(KeyAuthResponder.routes.label(for: "/authorize/x/y") == "/authorize/{unknown}")
        #expect(KeyAuthResponder.routes.label(for: "/account/devices/k1/rename") == "/account/devices/{kid}/rename")
        #expect(KeyAuthResponder.routes.label(for: "/nowhere") == nil)
    }

    @Test("the browser endpoints' form paths answer another method with 405 and Allow, other paths under them 404")
    func browserPathsWithTheWrongMethod() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        for (method, path, allowed) in [
            ("GET", "/account/sign-in", "POST"), ("POST", "/account", "GET, HEAD"),
            ("GET", "/account/devices/k1/revoke", "POST"), ("GET", "/authorize/consent", "POST"),
            ("PUT", "/authorize", "GET, POST"), ("HEAD", "/authorize", "GET, POST"),
            ("DELETE", "/userinfo", "GET, HEAD, POST"), ("HEAD", "/end-session", "GET, POST"),
        ] {
            let response = try api.send(method, path)
            #expect(response.status == 405, "\(method) \(path)")
            #expect(response.headers["Allow"] == allowed, "\(method) \(path)")
        }
        for path in ["/account/", "/account/devices/k1", "/authorize/x"] {
            #expect(try api.send("GET", path).status == 404, "\(path)")
        }
    }
}
