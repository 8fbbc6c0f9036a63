/// Where the sign-in pages' forms go, and what they carry besides the CSRF token: the account
/// page's own, or the authorization endpoint's with its request's reference.
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
    /// The application's name for the pages' heading (``PageDocument/application``), or nil.
    var application: String?

    /// The field of the waiting page's "Use another name" button, posted to ``signIn``.
    static let anotherUserField = "another_user"

    /// The account page's own forms.
    static func account(basePath: String) -> SignInForms {
        SignInForms(
            signIn: PageDocument.accountPath("/sign-in", basePath: basePath),
            continue: PageDocument.accountPath("/sign-in/continue", basePath: basePath),
            cancel: PageDocument.accountPath("/sign-in/cancel", basePath: basePath))
    }
}
