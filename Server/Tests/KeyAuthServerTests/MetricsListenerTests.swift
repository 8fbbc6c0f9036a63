import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `/metrics` lives on a listener of its own (loopback by default), never on the public one.
@Suite("The metrics listener", .timeLimit(.minutes(10)))
struct MetricsListenerTests {
    @Test("over sockets: /metrics is 404 on the public port and served on the metrics port; /healthz is on both")
    func separateListener() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer()
        defer { runner.stop() }
        let metricsPort = try #require(runner.metricsPort)
        #expect(metricsPort != 0)
        #expect(metricsPort != runner.port)
        let publicSide = SocketTransport(port: runner.port)
        let metricsSide = SocketTransport(port: metricsPort)

        let hidden = try publicSide.send(HTTPRequest(method: "GET", path: "/metrics"))
        #expect(hidden.status == 404)
        #expect(hidden.errorCode == "not_found")
        #expect(!hidden.text.contains("keyauth_"))
        #expect(try publicSide.send(HTTPRequest(method: "GET", path: "/healthz")).status == 200)

        let metrics = try metricsSide.send(HTTPRequest(method: "GET", path: "/metrics"))
        #expect(metrics.status == 200)
        #expect(metrics.headers["Content-Type"]?.hasPrefix("text/plain; version=0.0.4") == true)
        // The public requests above, counted; the metrics listener's own are not.
        #expect(metrics.text.contains("keyauth_http_requests_total{route=\"unknown\",method=\"GET\",status=\"404\"} 1"))
        #expect(
            metrics.text.contains("keyauth_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"} 1"))
        let health = try metricsSide.send(HTTPRequest(method: "GET", path: "/healthz"))
        #expect(health.status == 200)
        #expect(health.json == .object(["status": "ok"]))

        // Nothing else is served there.
        let token = try metricsSide.send(
            HTTPRequest(
                method: "POST", path: "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Array("grant_type=x".utf8)))
        #expect(token.status == 404)
        #expect(try metricsSide.send(HTTPRequest(method: "GET", path: "/.well-known/jwks.json")).status == 404)
        let post = try metricsSide.send(HTTPRequest(method: "POST", path: "/metrics"))
        #expect(post.status == 405)
        #expect(post.headers["Allow"] == "GET, HEAD")
    }

    @Test("--metrics-listen off starts no metrics listener")
    func off() throws {
        let environment = TestEnvironment()
        let runner = try environment.startServer { $0.metricsListener = .off }
        defer { runner.stop() }
        #expect(runner.metricsPort == nil)
        #expect(try SocketTransport(port: runner.port).send(HTTPRequest(method: "GET", path: "/metrics")).status == 404)
    }

    @Test("the default is loopback on the next port (any port beside port 0); flags, variables and errors")
    func parsing() throws {
        func metrics(_ arguments: [String], _ environment: [String: String] = [:]) throws -> String? {
            try serveConfiguration(arguments, environment).metricsAddress?.description
        }
        #expect(try metrics([]) == "127.0.0.1:8089")
        #expect(try metrics(["--listen", "0.0.0.0:9000"]) == "127.0.0.1:9001")
        #expect(try metrics(["--listen", "[::]:9000"]) == "127.0.0.1:9001")
        #expect(try metrics(["--listen", "127.0.0.1:0"]) == "127.0.0.1:0")
        #expect(try metrics(["--metrics-listen", "off"]) == nil)
        #expect(try metrics(["--metrics-listen", "[::1]:9100"]) == "[::1]:9100")
        #expect(try metrics([], ["KEYAUTH_SERVER_METRICS_LISTEN": "10.0.0.5:9100"]) == "10.0.0.5:9100")
        #expect(try metrics(["--listen", "127.0.0.1:65535", "--metrics-listen", "127.0.0.1:9100"]) == "127.0.0.1:9100")
        for bad in [["--listen", "127.0.0.1:65535"], ["--metrics-listen", "nowhere"], ["--metrics-listen", ""]] {
            #expect {
                _ = try metrics(bad)
            } throws: { error in
                (error as? ServerConfigurationError)?.message.hasPrefix("--metrics-listen: ") == true
            }
        }
    }

    @Test(
        "the binary prints the metrics address in its banner, and a taken metrics port stops it with 69")
    func binary() throws {
        let directory = TemporaryDirectory("keyauth-metrics")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess(
            name: "metrics", arguments: ["serve", "--listen", "127.0.0.1:0", "--db", directory.path + "/a.db"],
            logPath: directory.path + "/a.log")
        defer { server.terminate() }
        try server.waitUntilListening()
        let log = server.log
        let marker = "), metrics on http://127.0.0.1:"
        let range = try #require(log.range(of: marker))
        #expect(log.hasPrefix("keyauth-server: listening on http://127.0.0.1:"))
        let metricsPort = try #require(UInt16(log[range.upperBound...].prefix { $0.isNumber }))
        #expect(log[range.upperBound...].dropFirst(String(metricsPort).count).hasPrefix("/metrics\n"))
        #expect(try SocketTransport(port: metricsPort).send(HTTPRequest(method: "GET", path: "/metrics")).status == 200)

        // The same port again, taken by the first server.
        let second = try KeyAuthServerProcess(
            name: "taken",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", directory.path + "/b.db", "--metrics-listen",
                "127.0.0.1:\(metricsPort)",
            ], logPath: directory.path + "/b.log")
        #expect(second.waitUntilExit() == 69)
        #expect(second.log.hasPrefix("keyauth-server: cannot listen on 127.0.0.1:\(metricsPort)"))
        #expect(second.log.contains("--metrics-listen"))
    }
}
