/// The OpenID pages that end a request without going back to the relying party: a request that
/// cannot be sent back to its client (before its redirect URI is known good, no redirect is
/// safe), a form whose request is gone, and the end of a sign-out.
extension RefusedPage {
    /// A sign-in request refused before its client and redirect URI were known good.
    static func signInRequestRefused(basePath: String, reason: String) -> RefusedPage {
        RefusedPage(basePath: basePath, reason: reason, title: "Sign-in request refused")
    }

    /// A form whose sign-in request expired, was answered, or is another browser's.
    static func signInRequestExpired(basePath: String) -> RefusedPage {
        RefusedPage(
            basePath: basePath,
            reason: "This sign-in request has expired or was already answered; go back to the application and "
                + "sign in again.",
            title: "Sign-in request expired")
    }

    /// A sign-out request refused (a hint or a redirect URI not of this server).
    static func signOutRefused(basePath: String, reason: String) -> RefusedPage {
        RefusedPage(basePath: basePath, reason: reason, title: "Sign-out request refused")
    }

    /// The end of a sign-out with nowhere to send the browser back to.
    static func signedOut(basePath: String) -> RefusedPage {
        RefusedPage(basePath: basePath, reason: "You are signed out of keyauth.", title: "Signed out")
    }
}
