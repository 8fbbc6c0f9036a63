/// The page that waits for the user's device, with the code to type there; its script asks for
/// the sign-in's state and continues by itself once approved. "Use another name" posts the
/// sign-in form's action with ``SignInForms/anotherUserField``: the waiting session ends and the
/// user-name form comes back, after a typo in the name.
struct WaitingPage: Sendable {
    var basePath: String
    var session: BrowserSessionRecord
    var message: String?
    var forms: SignInForms

    var html: HTML {
        PageDocument(
            basePath: basePath, title: "Approve on your device",
            body: """
                <main><section class="card">
                <h2>Approve on your device</h2>
                \(PageDocument.message(message))
                <p>On a device registered for <strong>\(session.user)</strong>, run <code>keyauth approve</code> and type \
                this code:</p>
                <p id="binding-code">\(session.bindingCode)</p>
                <p class="muted">This page continues by itself once you approve. Deny the request on your device \
                if you did not start it.</p>
                <form method="post" id="continue-form" action="\(forms.continue)" \
                data-status-url="\(PageDocument.accountPath("/sign-in/status", basePath: basePath))">
                \(PageDocument.hidden("csrf", session.csrfToken))\(PageDocument.hiddenFields(forms.hidden))
                <button type="submit">Continue</button>
                </form>
                <form method="post" action="\(forms.cancel)">
                \(PageDocument.hidden("csrf", session.csrfToken))\(PageDocument.hiddenFields(forms.hidden))
                <button type="submit" class="secondary">Cancel</button>
                </form>
                <form method="post" action="\(forms.signIn)" class="another-user">
                \(PageDocument.hidden("csrf", session.csrfToken))\(PageDocument.hiddenFields(forms.hidden))
                <p class="muted">Not <strong>\(session.user)</strong>? \
                <button type="submit" name="\(SignInForms.anotherUserField)" value="1" class="link">Use another name</button></p>
                </form>
                </section></main>
                """,
            application: forms.application
        ).html
    }
}
