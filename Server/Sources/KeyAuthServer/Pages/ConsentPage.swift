/// The consent page of a signed-in user: whether `clientName` may have a sign-in, sent to
/// `redirectOrigin` (with its port: for a native app's loopback redirect the port is all that
/// tells one listener from another). One form to `action`, with the session's CSRF token,
/// `hidden` and a button for each answer: `decision` `allow` or `deny`.
struct ConsentPage: Sendable {
    var basePath: String
    var session: BrowserSessionRecord
    var clientName: String
    var redirectOrigin: String
    var action: String
    var hidden: [(String, String)]

    var html: HTML {
        PageDocument(
            basePath: basePath, title: "Allow sign-in",
            body: """
                <main><section class="card">
                <h2>Allow sign-in</h2>
                <p>Sign in to <strong>\(clientName)</strong> as <strong>\(session.user)</strong>?</p>
                <p>The sign-in goes to <strong id="redirect-origin">\(redirectOrigin)</strong>.</p>
                <p class="muted">Allow only if you have just started signing in to \(clientName) yourself. Any web \
                site or program can open this page, and whatever listens at that address receives the sign-in.</p>
                <form method="post" action="\(action)">
                \(PageDocument.hidden("csrf", session.csrfToken))\(PageDocument.hiddenFields(hidden))
                <button type="submit" name="decision" value="allow">Allow</button>
                <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
                </form>
                </section></main>
                """,
            application: clientName
        ).html
    }
}
