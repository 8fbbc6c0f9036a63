// An example service that trusts keyauth tokens, for service authors to copy.
//
// It answers one HTTP request read from standard input, the way a service started per
// connection by systemd (`Accept=yes`) or inetd does, and writes the answer to standard output:
// 200 with the user and device when the token (and for a DPoP-bound token, its proof) passes,
// 401 with the reason when it does not, 503 when the issuer's keys cannot be had, 400 for a
// request it cannot read, a target that is not a path, or two Authorization or DPoP headers.
//
//   keyauth-example-service --issuer https://auth.example.com --public-url https://api.example.com
//
// The verification itself is the block under "Verify": everything else is plumbing.
//
// A process per request keeps no state between requests: it fetches the issuer's keys each time,
// and its DPoP replay cache forgets a proof when it exits, so a proof replayed within its 60 s
// passes again: this example has no replay protection. A long-running service keeps one
// verifier for its lifetime (several instances share a `DPoPReplayCache`); this one only shows
// the calls.
//
// The URL a proof must name is the configured `--public-url` and the request's path, never the
// `Host` header: every keyauth token names the issuer as its audience, so the proof's URL is what
// keeps a token and proof sent to another service from passing here.
import Foundation
import KeyAuth

/// The options: the keyauth server's issuer URL, and the origin clients use to reach this
/// service (DPoP proofs name it).
struct Options {
    var issuer = ""
    var publicURL = ""
    var requireDPoP = false

    init(_ arguments: [String]) throws(KeyAuthError) {
        var remaining = arguments[...]
        while let name = remaining.popFirst() {
            switch name {
            case "--issuer": issuer = remaining.popFirst() ?? ""
            case "--public-url": publicURL = remaining.popFirst() ?? ""
            case "--require-dpop": requireDPoP = true
            default: throw KeyAuthError(.invalidArgument, "unknown option \(name)")
            }
        }
        guard !issuer.isEmpty, !publicURL.isEmpty else {
            throw KeyAuthError(
                .invalidArgument, "usage: keyauth-example-service --issuer URL --public-url URL [--require-dpop]")
        }
    }
}

/// The request line and the headers of one HTTP/1.1 request (names in lower case).
struct RequestHead {
    var method = ""
    var target = ""
    var headers: [String: String] = [:]

    /// Reads up to the empty line that ends the head.
    ///
    /// - Returns: the head, or why it is refused.
    static func read() -> Result<RequestHead, KeyAuthError> {
        let notHTTP = KeyAuthError(.invalidArgument, "not an HTTP request")
        var head = RequestHead()
        guard let requestLine = readLine()?.trimmingSuffix("\r") else { return .failure(notHTTP) }
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3 else { return .failure(notHTTP) }
        head.method = String(parts[0])
        head.target = String(parts[1])
        while let line = readLine()?.trimmingSuffix("\r"), !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { return .failure(notHTTP) }
            let value = line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
            let name = line[..<colon].lowercased()
            // Two of these are two credentials: a proxy may check one and pass the other.
            if ["authorization", "dpop"].contains(name), head.headers[name] != nil {
                let field = name == "dpop" ? "DPoP" : "Authorization"
                return .failure(KeyAuthError(.invalidArgument, "a request carries at most one \(field) header"))
            }
            head.headers[name] = String(value)
        }
        return .success(head)
    }
}

extension String {
    func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}

/// Writes an HTTP answer with a plain-text body.
func answer(_ status: Int, _ reason: String, _ body: String, headers: [String] = []) {
    var text = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    for header in headers { text += header + "\r\n" }
    print(text + "Content-Length: \(body.utf8.count + 1)\r\n\r\n" + body)
}

let options: Options
do throws(KeyAuthError) {
    options = try Options(Array(CommandLine.arguments.dropFirst()))
} catch {
    print(error.message)
    exit(64)
}
let request: RequestHead
switch RequestHead.read() {
case .success(let head): request = head
case .failure(let error):
    answer(400, "Bad Request", "refused: \(error.message)")
    exit(0)
}

// Verify. One verifier serves every request of a long-running service: it caches the
// issuer's keys and remembers the proofs already used.
do throws(KeyAuthError) {
    let verifier = try AccessTokenVerifier(issuer: options.issuer, requireDPoP: options.requireDPoP)
    let url = try AccessTokenVerifier.requestURL(origin: options.publicURL, target: request.target)
    let claims = try await verifier.verify(
        authorization: request.headers["authorization"], dpopProof: request.headers["dpop"],
        method: request.method, url: url)
    let binding = claims.isDPoPBound ? "DPoP-bound to" : "Bearer from"
    answer(200, "OK", "allowed: \(claims.user), \(binding) device \(claims.deviceKeyID), amr \(claims.amr)")
} catch {
    switch error.code {
    case .invalidArgument:
        answer(400, "Bad Request", "refused: \(error.message)")
    case .keySetUnavailable:
        answer(503, "Service Unavailable", "refused: \(error.message)")
    case .dpopProofInvalid:
        answer(
            401, "Unauthorized", "refused: \(error.message)",
            headers: [#"WWW-Authenticate: DPoP error="invalid_dpop_proof""#])
    default:
        answer(
            401, "Unauthorized", "refused: \(error.message)",
            headers: [#"WWW-Authenticate: Bearer error="invalid_token", DPoP error="invalid_token""#])
    }
}
