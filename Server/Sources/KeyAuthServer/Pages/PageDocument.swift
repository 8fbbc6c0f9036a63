/// The document every page is drawn in, and the pieces pages share.
///
/// The pages carry stable hooks for tests and scripts: the sign-in field `name="user"`, the
/// code in `id="binding-code"`, each device in an element with `data-kid`, buttons whose text is
/// `Approve`, `Deny`, `Revoke`, `Rename` and `Sign out`, and on the consent page the origin in
/// `id="redirect-origin"` and the buttons `Allow` and `Deny`.
struct PageDocument: Sendable {
    /// The issuer's path, before every link ("" when the issuer has none).
    var basePath: String
    var title: String
    /// Markup beside the heading (who is signed in), or nothing.
    var header: HTML = .empty
    var body: HTML
    /// The application a sign-in is for (an OpenID client's registered name), or nil on the
    /// account page's own pages: the heading names it, so that the user sees whom they sign in
    /// to before typing their name.
    var application: String? = nil

    /// The whole document: the style sheet, the script and the icon from this server only.
    var html: HTML {
        let assets = basePath + AccountPage.root
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="same-origin">
            <title>\(title) · keyauth</title>
            <link rel="icon" href="\(basePath + AccountAssets.faviconPath)" type="image/svg+xml">
            <link rel="stylesheet" href="\(assets)/account.css">
            <script src="\(assets)/account.js" defer></script>
            </head>
            <body>
            <header>\(heading)\(header)</header>
            \(body)
            </body>
            </html>

            """
    }

    /// `keyauth account`, or on an application's sign-in its name, with keyauth after it.
    private var heading: HTML {
        guard let application else { return "<h1>keyauth account</h1>" }
        return
            "<h1><span id=\"application-name\">\(application)</span> <span class=\"via\">· sign in with keyauth</span></h1>"
    }

    /// A page of one card headed by its title.
    static func card(basePath: String, title: String, content: HTML) -> PageDocument {
        PageDocument(
            basePath: basePath, title: title,
            body: """
                <main><section class="card">
                <h2>\(title)</h2>
                \(content)
                </section></main>
                """)
    }

    /// A hidden form field.
    static func hidden(_ name: String, _ value: String) -> HTML {
        "<input type=\"hidden\" name=\"\(name)\" value=\"\(value)\">"
    }

    /// Hidden fields, each on a line of its own after what comes before.
    static func hiddenFields(_ fields: [(String, String)]) -> HTML {
        fields.map { "\n\(hidden($0.0, $0.1))" as HTML }.joined()
    }

    /// The status line of a page, or nothing.
    static func message(_ message: String?) -> HTML {
        message.map { "<p class=\"message\" role=\"status\">\($0)</p>" } ?? .empty
    }

    /// The path of `path` under the account page, for form actions and links.
    static func accountPath(_ path: String, basePath: String) -> String {
        basePath + AccountPage.root + path
    }
}
