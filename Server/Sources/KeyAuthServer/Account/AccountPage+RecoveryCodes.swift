import KeyAuth

/// The account page's recovery codes (PROTOCOL.md section 9): a new set needs the approval of
/// one of the user's devices, as approving a device does, since a code enrols a device without
/// anyone's approval; the page then shows the set once, and only to the session that asked: the
/// request names that session (``SignInRequestRecord/requestedBy``), so another session of the
/// same user, a stolen cookie's for one, neither sees the request nor collects the codes its
/// approval makes.
extension AccountPage {
    /// `POST /account/recovery-codes`: asks the user's devices to approve a new set (a sign-in
    /// request of kind `recovery-codes`, whose code the page then shows).
    func requestRecoveryCodes(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        try withSignedInSession(request, form: form) { session in
            do {
                _ = try service.signIn.start(
                    kind: .recoveryCodes, clientID: nil, user: session.record.user, bindingMessage: nil, scope: nil,
                    requestedExpiry: nil, from: browser.clientAddress(of: request),
                    requestedBy: Self.tag(of: session))
            } catch let error as ServiceError {
                return try signedInPage(session, message: error.description, status: 400)
            }
            return redirect()
        }
    }

    /// `POST /account/recovery-codes/show`: once the request the form names was approved by an
    /// active device of the user, makes the new set and shows it, on this answer only (the
    /// request is used up first, so a second post shows nothing).
    ///
    /// The request's expiry ends the wait for an answer, not an answer given in time (PROTOCOL.md
    /// section 9), as for a browser sign-in: a device answers only a live request (one
    /// conditional update), and the page collects what it was told for
    /// ``SignInRequests/answerGrace`` past the expiry, the time a person takes to click `Show`
    /// after answering on the device. Only an unanswered request, or an approval left
    /// uncollected past that grace, is expired. The grace is checked in the collection itself,
    /// against the clock read for it, so a `Show` that starts in its last instant either
    /// collects within it or makes nothing.
    func showRecoveryCodes(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        try withSignedInSession(request, form: form) { session in
            let user = session.record.user
            let id = form["request"] ?? ""
            guard InputRules.isValidSignInRequestID(id), let record = try service.storage.signInRequest(id: id),
                record.kind == .recoveryCodes, record.user == user, Self.isTag(record.requestedBy, of: session)
            else { return try signedInPage(session, message: "There is no such request; start again.", status: 400) }
            let expired = "The request expired; start again."
            let unusable = "The request can no longer be used; start again."
            let refusal: String? =
                switch record.status {
                case .pending where service.signIn.isExpired(record): expired
                case .pending: "Not approved yet: approve it on one of your devices first."
                case .denied: "The request was denied on your device."
                case .issued: "These codes were shown already; make a new set if you did not keep them."
                // Checked before the hashing too: an approval past its grace would otherwise
                // have a set made for every post, refused only at the collection, and a post
                // repeated would keep the hashing slots that typed codes need busy.
                case .approved where !SignInRequests.isCollectable(record, at: service.now()): expired
                case .approved: nil
                }
            if let refusal { return try signedInPage(session, message: refusal, status: 400) }
            guard let kid = record.answeringKID, let approver = try service.storage.device(kid: kid),
                approver.status == .active, approver.user == user
            else { return try signedInPage(session, message: unusable, status: 400) }
            // Hashed before the approval is collected, so that a busy server leaves it to collect.
            let set: RecoveryCodeSet
            do {
                set = try service.recoveryCodes.makeSet(for: user)
            } catch let error as ServiceError {
                guard case .busy = error.kind else { throw error }
                return try signedInPage(
                    session, message: "The server is busy; try Show the new codes again in a moment.", status: 503)
            }
            let time = service.now()
            guard
                try service.storage.markSignInRequestIssued(
                    id: id, expiringAfter: SignInRequests.collectionCutoff(at: time))
            else {
                let message = SignInRequests.isCollectable(record, at: time) ? unusable : expired
                return try signedInPage(session, message: message, status: 400)
            }
            do {
                try service.recoveryCodes.store(
                    set, by: .accountPage(approvedBy: kid), whileActive: kid, askedBy: session.record.idHash)
            } catch let error as ServiceError where error.kind == .accessDenied {
                // The approving device was revoked while the codes were made, or this session
                // ended (its device revoked, a sign-out).
                return try signedInPage(session, message: unusable, status: 400)
            }
            return try signedInPage(session, message: nil, newRecoveryCodes: set.codes)
        }
    }

    /// The recovery codes section of the signed-in page for `session`.
    ///
    /// The show form stays while the session's newest request waits for a device and, once
    /// approved, while the approval can be collected: a page reloaded after answering on the
    /// device still offers `Show the new codes`.
    func recoveryCodesSection(
        _ session: BrowserSessions.Presented, open: [SignInRequestRecord], newCodes: [String]?
    ) throws -> RecoveryCodesSection {
        let approved = try service.storage.approvedSignInRequests(
            user: session.record.user, kind: .recoveryCodes,
            expiringAfter: SignInRequests.collectionCutoff(at: service.now()))
        let waiting = (open + approved).filter { $0.kind == .recoveryCodes && Self.isTag($0.requestedBy, of: session) }
            .max { $0.position < $1.position }
        return RecoveryCodesSection(
            basePath: basePath, csrf: session.record.csrfToken,
            remaining: try service.recoveryCodes.remaining(for: session.record.user),
            pending: newCodes == nil
                ? waiting.map { (id: $0.id, code: $0.bindingMessage, approved: $0.status == .approved) } : nil,
            newCodes: newCodes)
    }
}
