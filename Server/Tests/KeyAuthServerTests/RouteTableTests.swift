import Testing

@testable import KeyAuthServer

@Suite("Routes declared once: patterns, methods and the 405 Allow list")
struct RouteTableTests {
    private let table = RouteTable<String>([
        RouteDeclaration([.get, .head], "/v1/devices", "list"),
        RouteDeclaration([.post], "/v1/devices", "register"),
        RouteDeclaration([.delete], "/v1/devices/{kid}", "revoke"),
        RouteDeclaration([.post], "/v1/devices/{kid}/approve", "approve"),
    ])

    @Test("a parameter takes one non-empty segment, literals must be equal")
    func patternsMatchWholeSegments() {
        let pattern = PathPattern("/v1/devices/{kid}/approve")
        #expect(pattern.match("/v1/devices/abc/approve")?["kid"] == "abc")
        #expect(pattern.match("/v1/devices//approve") == nil)
        #expect(pattern.match("/v1/devices/a/b/approve") == nil)
        #expect(pattern.match("/v1/devices/abc/approve/") == nil)
        #expect(pattern.match("/v1/devices/abc/Approve") == nil)
        #expect(pattern.match("v1/devices/abc/approve") == nil)
        #expect(PathPattern("/healthz").match("/healthz") == RouteParameters())
        #expect(pattern.description == "/v1/devices/{kid}/approve")
    }

    @Test("a path splits at every slash byte, empty segments included, and only when it starts with one")
    func segments() {
        for path in ["/", "//", "/v1/devices", "/v1/devices/", "/a//b", "/é/ü/x", "/a/\u{301}b", "/%2F/x"] {
            let expected = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
            let slashes = path.unicodeScalars.filter { $0 == "/" }.count
            #expect(PathPattern.segments(of: path)?.map(String.init).count == slashes, "\(path)")
            if path != "/a/\u{301}b" {
                #expect(PathPattern.segments(of: path)?.map(String.init) == expected, "\(path)")
            }
        }
        // A combining mark after a slash starts a segment: paths are split as bytes, not characters.
        #expect(PathPattern.segments(of: "/a/\u{301}b")?.map(String.init) == ["a", "\u{301}b"])
        #expect(PathPattern.segments(of: "v1/devices") == nil)
        #expect(PathPattern.segments(of: "") == nil)
    }

    @Test("a Content-Type's media type is compared without its parameters, blanks or ASCII case")
    func mediaTypes() {
        let form = "application/x-www-form-urlencoded"
        for value in [form, " \tApplication/X-WWW-Form-URLEncoded ; charset=utf-8", form + ";", "\t" + form + "\t"] {
            #expect(HTTPHeaders.mediaType(of: value, is: form), "\(value)")
        }
        for value in [
            "", ";", "application/json", form + "x", "x" + form, "application/x-www-form-urlencode", "é" + form,
        ] {
            #expect(!HTTPHeaders.mediaType(of: value, is: form), "\(value)")
        }
    }

    @Test("a rest parameter takes one segment or more, and its label leaves out the star")
    func restParametersTakeTheRest() {
        let pattern = PathPattern("/account/{unknown*}")
        #expect(pattern.description == "/account/{unknown}")
        #expect(pattern.match("/account/x")?["unknown"] == "x")
        #expect(pattern.match("/account/x/y/")?["unknown"] == "x/y/")
        #expect(pattern.match("/account") == nil)
        #expect(pattern.match("/accounts/x") == nil)
    }

    @Test("the route answering the method wins; several routes may share a path")
    func methodsPickTheHandler() {
        guard case .found(let list, _) = table.match(method: "GET", path: "/v1/devices") else {
            Issue.record("GET /v1/devices found no route")
            return
        }
        #expect(list.handler == "list")
        guard case .found(let register, _) = table.match(method: "POST", path: "/v1/devices") else {
            Issue.record("POST /v1/devices found no route")
            return
        }
        #expect(register.handler == "register")
        guard case .found(let head, _) = table.match(method: "HEAD", path: "/v1/devices") else {
            Issue.record("HEAD found no route")
            return
        }
        #expect(head.handler == "list")
    }

    @Test("a known path with another method is 405 listing every method of the path; an unknown path is 404")
    func wrongMethodsAndUnknownPaths() {
        guard case .methodNotAllowed(let allowed, let label) = table.match(method: "PUT", path: "/v1/devices") else {
            Issue.record("PUT /v1/devices was not 405")
            return
        }
        #expect(allowed == [.get, .head, .post])
        #expect(label == "/v1/devices")
        guard case .methodNotAllowed(let only, let kidLabel) = table.match(method: "BREW", path: "/v1/devices/x")
        else {
            Issue.record("an unknown method on a known path was not 405")
            return
        }
        #expect(only == [.delete])
        #expect(kidLabel == "/v1/devices/{kid}")
        guard case .notFound = table.match(method: "GET", path: "/v1/device") else {
            Issue.record("an unknown path was not 404")
            return
        }
    }

    @Test("a literal path is answered as declared, by a parameter pattern declared before it too")
    func literalPathsKeepDeclarationOrder() {
        let overlapping = RouteTable<String>([
            RouteDeclaration([.delete], "/v1/devices/{kid}", "revoke"),
            RouteDeclaration([.get], "/v1/devices/mine", "mine"),
        ])
        guard case .found(let mine, let none) = overlapping.match(method: "GET", path: "/v1/devices/mine"),
            case .found(let revoke, let parameters) = overlapping.match(method: "DELETE", path: "/v1/devices/mine")
        else {
            Issue.record("GET or DELETE /v1/devices/mine found no route")
            return
        }
        #expect(mine.handler == "mine" && none == RouteParameters())
        #expect(revoke.handler == "revoke" && parameters["kid"] == "mine")
        guard
            case .methodNotAllowed(let allowed, let label) = overlapping.match(method: "PUT", path: "/v1/devices/mine")
        else {
            Issue.record("PUT /v1/devices/mine was not 405")
            return
        }
        #expect(allowed == [HTTPMethod.delete, .get].sorted())
        #expect(label == "/v1/devices/{kid}")
        // Another spelling of the path is not the literal: it goes through the patterns.
        guard case .notFound = overlapping.match(method: "GET", path: "/v1/devices/mine/") else {
            Issue.record("a trailing slash found a route")
            return
        }
        #expect(PathPattern("/v1/devices/mine").isLiteral && !PathPattern("/v1/devices/{kid}").isLiteral)
    }

    @Test("the endpoint list merges the methods of one pattern, in declaration order")
    func endpointsListEachPatternOnce() {
        let endpoints = table.endpoints.map { ($0.methods.map(\.rawValue).joined(separator: ", "), $0.pattern) }
        #expect(endpoints.map(\.1) == ["/v1/devices", "/v1/devices/{kid}", "/v1/devices/{kid}/approve"])
        #expect(endpoints.map(\.0) == ["GET, POST", "DELETE", "POST"])
    }

    @Test("metrics name only known methods")
    func methodLabelsAreBounded() {
        #expect(HTTPMethod.label(of: "DELETE") == "DELETE")
        #expect(HTTPMethod.label(of: "get") == "OTHER")
        #expect(HTTPMethod.label(of: "X-ANYTHING") == "OTHER")
    }
}

@Suite("Catch-all routes")
struct CatchAllRouteTests {
    private let table = RouteTable<String>([
        RouteDeclaration([.post], "/account/sign-in", "sign-in"),
        RouteDeclaration([.get, .head, .post], "/account/{unknown*}", "not found"),
    ])

    @Test("a known path with the wrong method is 405 even under a catch-all; other paths go to the catch-all")
    func catchAllsComeLast() {
        guard case .methodNotAllowed(let allowed, let label) = table.match(method: "GET", path: "/account/sign-in")
        else {
            Issue.record("GET /account/sign-in was not 405")
            return
        }
        #expect(allowed == [.post])
        #expect(label == "/account/sign-in")
        guard case .found(let route, let parameters) = table.match(method: "POST", path: "/account/x/y") else {
            Issue.record("the catch-all took nothing")
            return
        }
        #expect(route.handler == "not found" && parameters["unknown"] == "x/y")
        #expect(table.label(for: "/account/x/y") == "/account/{unknown}")
        #expect(table.label(for: "/elsewhere") == nil)
    }
}
