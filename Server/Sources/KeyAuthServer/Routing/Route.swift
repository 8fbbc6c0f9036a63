/// The server's public endpoints (PROTOCOL.md section 4), matched from a path.
///
/// `/metrics` is not one of them: it is served on the metrics listener only
/// (``OperationsResponder``), so here it is an unknown path.
enum Route: Sendable, Equatable {
    case devices
    case device(kid: String)
    case approveDevice(kid: String)
    case token
    case jwks
    case openIDConfiguration
    case health
    /// `POST /bc-authorize`: a client application starts a sign-in request (CIBA).
    case backchannelAuthorize
    /// `GET /v1/auth-requests`: the open sign-in requests of the caller's user.
    case signInRequests
    /// `POST /v1/auth-requests/{id}`: a device answers one.
    case signInRequest(id: String)
    /// `POST /v1/auth-requests/{id}/code`: a device checks the code its user typed.
    case signInRequestCode(id: String)
    /// `/account` and everything under it: the account page, which routes its own paths.
    case account(path: String)
    /// `/authorize` and its sign-in forms: the OpenID Connect authorization endpoint.
    case authorize(path: String)
    /// `/userinfo`: the OpenID Connect UserInfo endpoint.
    case userInfo
    /// `/end-session`: RP-Initiated Logout.
    case endSession

    /// The route for `path`, or nil for an unknown path (404).
    init?(path: String) {
        switch path {
        case "/v1/devices": self = .devices
        case "/oauth/token": self = .token
        case "/.well-known/jwks.json": self = .jwks
        case "/.well-known/openid-configuration": self = .openIDConfiguration
        case "/healthz": self = .health
        case "/bc-authorize": self = .backchannelAuthorize
        case "/v1/auth-requests": self = .signInRequests
        case "/userinfo": self = .userInfo
        case EndSessionEndpoint.path: self = .endSession
        case _ where path == AuthorizationEndpoint.root || path.hasPrefix(AuthorizationEndpoint.root + "/"):
            self = .authorize(path: path)
        case _ where path == AccountPage.root || path.hasPrefix(AccountPage.root + "/"):
            self = .account(path: path)
        case _ where path.hasPrefix("/v1/auth-requests/"):
            let parts = path.dropFirst("/v1/auth-requests/".count).split(
                separator: "/", omittingEmptySubsequences: false)
            switch parts.count {
            case 1 where !parts[0].isEmpty: self = .signInRequest(id: String(parts[0]))
            case 2 where !parts[0].isEmpty && parts[1] == "code": self = .signInRequestCode(id: String(parts[0]))
            default: return nil
            }
        default:
            let prefix = "/v1/devices/"
            guard path.hasPrefix(prefix) else { return nil }
            let rest = path.dropFirst(prefix.count)
            let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
            switch parts.count {
            case 1 where !parts[0].isEmpty:
                self = .device(kid: String(parts[0]))
            case 2 where !parts[0].isEmpty && parts[1] == "approve":
                self = .approveDevice(kid: String(parts[0]))
            default:
                return nil
            }
        }
    }

    /// The methods the route answers; any other gets 405 with this list in `Allow`.
    var allowedMethods: [String] {
        switch self {
        case .devices: ["GET", "POST"]
        case .device: ["DELETE"]
        case .approveDevice, .token, .backchannelAuthorize, .signInRequest, .signInRequestCode: ["POST"]
        case .jwks, .openIDConfiguration, .health, .signInRequests: ["GET", "HEAD"]
        case .account, .authorize: ["GET", "HEAD", "POST"]
        case .userInfo, .endSession: ["GET", "HEAD", "POST"]
        }
    }

    /// The pattern, for metrics labels: bounded, never a raw path.
    var label: String {
        switch self {
        case .devices: "/v1/devices"
        case .device: "/v1/devices/{kid}"
        case .approveDevice: "/v1/devices/{kid}/approve"
        case .token: "/oauth/token"
        case .jwks: "/.well-known/jwks.json"
        case .openIDConfiguration: "/.well-known/openid-configuration"
        case .health: "/healthz"
        case .backchannelAuthorize: "/bc-authorize"
        case .signInRequests: "/v1/auth-requests"
        case .signInRequest: "/v1/auth-requests/{id}"
        case .signInRequestCode: "/v1/auth-requests/{id}/code"
        case .account(let path): AccountPage.label(of: path)
        case .authorize(let path): AuthorizationEndpoint.label(of: path)
        case .userInfo: "/userinfo"
        case .endSession: EndSessionEndpoint.path
        }
    }
}
