/// The sign-in form: a user name, then the waiting page.
struct SignInPage: Sendable {
    var basePath: String
    /// The double-submit token the form carries.
    var csrf: String
    var message: String?
    var forms: SignInForms
    /// The user name to prefill, or nil.
    var user: String?

    var html: HTML {
        let requester: HTML? = forms.requester.map { "<p>\($0)</p>" }
        let value: HTML? = user.map { " value=\"\($0)\"" }
        return PageDocument(
            basePath: basePath, title: "Sign in",
            body: """
                <main><section class="card">
                <h2>Sign in</h2>
                \(PageDocument.message(message))
                \(requester)
                <p class="muted">Type your user name. The page then shows a code; approve the sign-in on one of your \
                devices with <code>keyauth approve</code> and type the code there.</p>
                <form method="post" action="\(forms.signIn)">
                \(PageDocument.hidden("csrf", csrf))\(PageDocument.hiddenFields(forms.hidden))
                <label for="user">User name</label>
                <input type="text" id="user" name="user" autocomplete="username" autocapitalize="none" \
                spellcheck="false" required maxlength="64" autofocus\(value)>
                <button type="submit">Sign in</button>
                </form>
                </section></main>
                """,
            application: forms.application
        ).html
    }
}
