import Foundation
import KeyAuth
import KeyAuthTestSupport

/// Apache with mod_auth_openidc as a relying party of a keyauth-server, configured by the
/// repository's `docs/apache-openidc.conf`, the block docs/WEB-SIGN-IN.md shows, so that the test runs
/// the configuration users copy.
///
/// It is registered with `keyauth-server clients add` like any application, with its redirect
/// URI and its post-logout page, and serves a protected page that shows `REMOTE_USER` and the
/// `sub` claim through server-side includes, with a link that signs out; its home page links to
/// the protected page. Tests follow those links rather than typing URLs: a navigation the site
/// starts is what SameSite cookie rules judge, while Chromium treats a typed URL as same-site
/// through every redirect.
struct ApacheRelyingParty {
    /// The modules the configuration needs besides Apache's base.
    static let modules = ["authz_user", "auth_openidc", "mime", "include", "dir"]
    /// The configuration docs/WEB-SIGN-IN.md shows.
    static let configurationFile = Vectors.packageRoot.appendingPathComponent("docs/apache-openidc.conf").path

    /// Whether Apache and the modules are installed; the tests say so when they are not.
    static var isInstalled: Bool { ApacheServer.isInstalled(modules: modules) }

    let apache: ApacheServer
    /// The name the application was registered with, which the approval shows.
    let name: String
    let clientID: String

    /// The site, `http://localhost:PORT`.
    var url: String { apache.url }
    /// The page only a signed-in user sees.
    var protectedURL: String { url + "/protected/" }
    /// The module's own endpoint, registered as the redirect URI.
    var redirectURI: String { url + "/protected/redirect_uri" }
    /// The page the provider returns to after logout, registered with the provider.
    var signedOutURL: String { url + "/signed-out.html" }

    /// `text` as a query parameter's value.
    private static func percentEncoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }

    /// Registers an application called `name` with the server whose database is `database`, and
    /// starts Apache for it.
    ///
    /// - Throws: ``TestFailure`` when `clients add` fails or Apache does not start (with its logs).
    init(name: String, provider: KeyAuthServerProcess, database: String) throws {
        let port = ApacheServer.freePort()
        let site = "http://localhost:\(port)"
        let client = try RegisteredClient(
            adding: [
                name, "--redirect-uri", site + "/protected/redirect_uri", "--post-logout-redirect-uri",
                site + "/signed-out.html",
            ], database: database)
        guard let secret = client.secret else { throw TestFailure("clients add printed no client_secret") }
        clientID = client.id
        self.name = name
        apache = try ApacheServer(
            port: port, modules: Self.modules,
            defines: [
                "KEYAUTH_ISSUER": provider.url, "APP_URL": site, "KEYAUTH_CLIENT_ID": client.id,
                "KEYAUTH_CLIENT_SECRET": secret, "OIDC_CRYPTO_PASSPHRASE": UUID().uuidString,
            ],
            site: """
                Options +IncludesNoExec
                AddOutputFilter INCLUDES .shtml
                DirectoryIndex index.shtml index.html
                Include \(Self.configurationFile)
                """,
            documents: [
                "index.html":
                    "<!doctype html><title>\(name)</title><p><a id=\"open\" href=\"/protected/\">Open</a></p>\n",
                "protected/index.shtml": """
                <!doctype html><title>\(name)</title><h1>\(name)</h1>
                <p>Signed in as <span id="user"><!--#echo var="REMOTE_USER" --></span>
                (sub <span id="sub"><!--#echo var="OIDC_CLAIM_sub" --></span>)</p>
                <p><a id="logout" href="/protected/redirect_uri?logout=\(Self.percentEncoded(site + "/signed-out.html"))">\
                Sign out</a></p>

                """,
                "signed-out.html": "<!doctype html><title>\(name)</title><h1 id=\"signed-out\">Signed out</h1>\n",
            ])
    }
}
