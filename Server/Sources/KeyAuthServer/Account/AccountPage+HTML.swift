import KeyAuth

/// The account page's HTML. Every value from outside (user and device names, addresses, codes,
/// messages) goes through ``HTMLText/escape(_:)``; the pages carry stable hooks for tests and
/// scripts: the sign-in field `name="user"`, the code in `id="binding-code"`, each device in an
/// element with `data-kid`, buttons whose text is `Approve`, `Deny`, `Revoke`, `Rename` and
/// `Sign out`, and on the consent page the origin in `id="redirect-origin"` and the buttons
/// `Allow` and `Deny`.
extension AccountPage {
    /// Where the sign-in pages' forms go, and what they carry besides the CSRF token: the
    /// account page's own, or the authorization endpoint's with its request's reference.
    struct SignInForms: Sendable {
        /// The form action of the user name form.
        var signIn: String
        /// The form action of Continue.
        var `continue`: String
        /// The form action of Cancel.
        var cancel: String
        /// Hidden fields every form carries.
        var hidden: [(String, String)] = []
        /// A line above the form naming who asks (an application), or nil.
        var requester: String?
    }

    /// The account page's own forms.
    var accountForms: SignInForms {
        SignInForms(
            signIn: basePath + Self.root + "/sign-in", continue: basePath + Self.root + "/sign-in/continue",
            cancel: basePath + Self.root + "/sign-in/cancel")
    }

    /// The sign-in form, its user name field prefilled with `user`.
    func signInPage(csrf: String, message: String?, forms: SignInForms? = nil, user: String? = nil) -> String {
        let forms = forms ?? accountForms
        let requester = forms.requester.map { "<p>\(HTMLText.escape($0))</p>" } ?? ""
        let value = user.map { " value=\"\(HTMLText.escape($0))\"" } ?? ""
        return Self.document(
            basePath: basePath, title: "Sign in",
            body: """
                <main><section class="card">
                <h2>Sign in</h2>
                \(Self.messageBlock(message))
                \(requester)
                <p class="muted">Type your user name. The page then shows a code; approve the sign-in on one of your \
                devices with <code>keyauth approve</code> and type the code there.</p>
                <form method="post" action="\(HTMLText.escape(forms.signIn))">
                \(Self.hidden("csrf", csrf))\(Self.hiddenFields(forms.hidden))
                <label for="user">User name</label>
                <input type="text" id="user" name="user" autocomplete="username" autocapitalize="none" \
                spellcheck="false" required maxlength="64"\(value)>
                <button type="submit">Sign in</button>
                </form>
                </section></main>
                """)
    }

    /// The page that waits for the user's device, with the code to compare.
    func waitingPage(_ session: BrowserSessionRecord, message: String?, forms: SignInForms? = nil) -> String {
        let forms = forms ?? accountForms
        let user = HTMLText.escape(session.user)
        return Self.document(
            basePath: basePath, title: "Approve on your device",
            body: """
                <main><section class="card">
                <h2>Approve on your device</h2>
                \(Self.messageBlock(message))
                <p>On a device registered for <strong>\(user)</strong>, run <code>keyauth approve</code> and type \
                this code:</p>
                <p id="binding-code">\(HTMLText.escape(session.bindingCode))</p>
                <p class="muted">This page continues by itself once you approve. Deny the request on your device \
                if you did not start it.</p>
                <form method="post" id="continue-form" action="\(HTMLText.escape(forms.continue))" \
                data-status-url="\(action("/sign-in/status"))">
                \(Self.hidden("csrf", session.csrfToken))\(Self.hiddenFields(forms.hidden))
                <button type="submit">Continue</button>
                </form>
                <form method="post" action="\(HTMLText.escape(forms.cancel))">
                \(Self.hidden("csrf", session.csrfToken))\(Self.hiddenFields(forms.hidden))
                <button type="submit" class="secondary">Cancel</button>
                </form>
                </section></main>
                """)
    }

    /// The signed-in page: the user's devices and what can be done with each. A pending device
    /// with a code in `approvalCodes` waits for the user to approve it on another device.
    func signedInPage(
        _ session: BrowserSessionRecord, devices: [DeviceRecord], approvalCodes: [String: String] = [:],
        message: String?
    ) -> String {
        let approver = devices.first { $0.kid == session.approvingKID }
        let approvedBy =
            approver.map { "device <strong>\(HTMLText.escape($0.name))</strong>" } ?? "one of your devices"
        let rows = devices.map {
            deviceRow(
                $0, csrf: session.csrfToken, isApprover: $0.kid == session.approvingKID,
                approvalCode: approvalCodes[$0.kid])
        }
        return Self.document(
            basePath: basePath, title: "Your devices",
            header: """
                <span>Signed in as <strong>\(HTMLText.escape(session.user))</strong></span>
                <form method="post" class="inline" action="\(action("/sign-out"))">
                \(Self.hidden("csrf", session.csrfToken))
                <button type="submit" class="secondary">Sign out</button>
                </form>
                """,
            body: """
                <main>
                <h2>Your devices</h2>
                \(Self.messageBlock(message))
                <p class="muted">Signed in with the approval of \(approvedBy) \
                (\(HTMLText.escape(session.methods.joined(separator: " ")))). The session ends after 15 minutes \
                without use, when you sign out, or when that device is revoked.</p>
                <table>
                <thead><tr><th>Name</th><th>Status</th><th>Key store</th><th>Created</th><th>Last login</th>\
                <th>Registered from</th><th>Key id</th><th>Actions</th></tr></thead>
                <tbody>
                \(rows.joined(separator: "\n"))
                </tbody>
                </table>
                </main>
                """)
    }

    /// One device's row, with the forms its state allows.
    private func deviceRow(_ device: DeviceRecord, csrf: String, isApprover: Bool, approvalCode: String?) -> String {
        let status = service.visibleStatus(device)
        let kid = HTMLText.escape(device.kid)
        var forms: [String] = []
        func button(_ verb: DeviceAction, _ text: String, style: String = "") -> String {
            """
            <form method="post" action="\(action("/devices/\(device.kid)/\(verb.rawValue)"))">\
            \(Self.hidden("csrf", csrf))<button type="submit"\(style.isEmpty ? "" : " class=\"\(style)\"")>\
            \(text)</button></form>
            """
        }
        switch status {
        case .pending:
            if let approvalCode {
                // The code is shown here, where the approval started, and typed on the device.
                forms.append(
                    """
                    <p class="approval-code">On one of your devices, run <code>keyauth approve</code> and type \
                    <strong data-approval-code>\(HTMLText.escape(approvalCode))</strong>, then reload.</p>
                    """)
            } else {
                forms.append(button(.approve, "Approve"))
            }
            forms.append(button(.deny, "Deny", style: "danger"))
        case .active:
            forms.append(button(.revoke, "Revoke", style: "danger"))
        default:
            break
        }
        if status == .active || status == .pending {
            forms.append(
                """
                <form method="post" action="\(action("/devices/\(device.kid)/rename"))">\
                \(Self.hidden("csrf", csrf))<input type="text" name="name" aria-label="New name" maxlength="64" \
                required value="\(HTMLText.escape(device.name))"> <button type="submit" class="secondary">Rename\
                </button></form>
                """)
        }
        let name = HTMLText.escape(device.name) + (isApprover ? " <span class=\"muted\">(signed in with)</span>" : "")
        return """
            <tr data-kid="\(kid)">
            <td class="name">\(name)</td>
            <td class="status status-\(HTMLText.escape(status.rawValue))">\(HTMLText.escape(status.rawValue))</td>
            <td>not reported</td>
            <td>\(HTMLText.escape(RFC3339.string(fromSeconds: device.createdAt)))</td>
            <td>\(HTMLText.escape(device.lastLoginAt.map(RFC3339.string(fromSeconds:)) ?? "never"))</td>
            <td>\(HTMLText.escape(device.registeredFrom ?? "unknown"))</td>
            <td class="kid">\(kid)</td>
            <td class="actions">\(forms.joined())</td>
            </tr>
            """
    }

    /// A page for a refused request (another site's form, an expired token).
    static func refusedPage(basePath: String, reason: String, title: String = "Refused") -> String {
        document(
            basePath: basePath, title: title,
            body: """
                <main><section class="card">
                <h2>\(HTMLText.escape(title))</h2>
                <p>\(HTMLText.escape(reason))</p>
                <p><a href="\(HTMLText.escape(basePath + root))">Back to your account</a></p>
                </section></main>
                """)
    }

    /// The consent page of a signed-in user: whether `clientName` may have a sign-in, sent to
    /// `redirectOrigin` (with its port: for a native app's loopback redirect the port is all
    /// that tells one listener from another). One form to `action`, with the session's CSRF
    /// token, `hidden` and a button for each answer: `decision` `allow` or `deny`.
    func consentPage(
        _ session: BrowserSessionRecord, clientName: String, redirectOrigin: String, action: String,
        hidden: [(String, String)]
    ) -> String {
        let name = HTMLText.escape(clientName)
        return Self.document(
            basePath: basePath, title: "Allow sign-in",
            body: """
                <main><section class="card">
                <h2>Allow sign-in</h2>
                <p>Sign in to <strong>\(name)</strong> as <strong>\(HTMLText.escape(session.user))</strong>?</p>
                <p>The sign-in goes to <strong id="redirect-origin">\(HTMLText.escape(redirectOrigin))</strong>.</p>
                <p class="muted">Allow only if you have just started signing in to \(name) yourself. Any web site \
                or program can open this page, and whatever listens at that address receives the sign-in.</p>
                <form method="post" action="\(HTMLText.escape(action))">
                \(Self.hidden("csrf", session.csrfToken))\(Self.hiddenFields(hidden))
                <button type="submit" name="decision" value="allow">Allow</button>
                <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
                </form>
                </section></main>
                """)
    }

    /// A page with one question and one form (`fields` already HTML).
    func confirmationPage(title: String, text: String, action: String, fields: String, button: String) -> String {
        Self.document(
            basePath: basePath, title: title,
            body: """
                <main><section class="card">
                <h2>\(HTMLText.escape(title))</h2>
                <p>\(HTMLText.escape(text))</p>
                <form method="post" action="\(HTMLText.escape(action))">
                \(fields)
                <button type="submit">\(HTMLText.escape(button))</button>
                </form>
                </section></main>
                """)
    }

    // MARK: Pieces

    /// The form action or URL of `path` under the page.
    private func action(_ path: String) -> String {
        HTMLText.escape(basePath + Self.root + path)
    }

    private static func hiddenFields(_ fields: [(String, String)]) -> String {
        fields.map { "\n" + hidden($0.0, $0.1) }.joined()
    }

    static func hidden(_ name: String, _ value: String) -> String {
        "<input type=\"hidden\" name=\"\(HTMLText.escape(name))\" value=\"\(HTMLText.escape(value))\">"
    }

    private static func messageBlock(_ message: String?) -> String {
        message.map { "<p class=\"message\" role=\"status\">\(HTMLText.escape($0))</p>" } ?? ""
    }

    /// The document around `body`: the style sheet and the script from this server only.
    private static func document(basePath: String, title: String, header: String = "", body: String) -> String {
        let assets = HTMLText.escape(basePath + root)
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="same-origin">
            <title>\(HTMLText.escape(title)) · keyauth</title>
            <link rel="stylesheet" href="\(assets)/account.css">
            <script src="\(assets)/account.js" defer></script>
            </head>
            <body>
            <header><h1>keyauth account</h1>\(header)</header>
            \(body)
            </body>
            </html>

            """
    }
}
