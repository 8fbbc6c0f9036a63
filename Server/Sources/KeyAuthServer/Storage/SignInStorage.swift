/// What sign-in by approval keeps: client applications, sign-in requests and browser sessions
/// (PROTOCOL.md section 8). Part of ``ServerStorage``; in its own protocol so that the tables of
/// the feature are found together.
///
/// As everywhere in the storage, every race is one atomic step: the cap on open requests is
/// checked and the request inserted under a per-user lock, an answer is a conditional update
/// from `pending`, a token or a browser session is handed out by a conditional update from
/// `approved`, and a poll's interval check holds a per-request lock.
package protocol SignInStorage: Sendable {
    // MARK: Clients

    /// Adds a client; false when its id is taken.
    func insertClient(_ client: ClientRecord) throws(StorageError) -> Bool

    /// The client with `id`, if any.
    func client(id: String) throws(StorageError) -> ClientRecord?

    /// Every client, oldest first.
    func allClients() throws(StorageError) -> [ClientRecord]

    /// Removes a client; false when there was none. Its open requests can no longer be collected.
    func deleteClient(id: String) throws(StorageError) -> Bool

    // MARK: Sign-in requests

    /// Stores `request` unless its user already has as many requests of the same origin as
    /// `limits` allow (open at `now`, or made within the window), checking and inserting in one
    /// atomic step; with ``SignInRequestLimits/replacesSameAddress``, the user's open requests of
    /// that origin from the same address expire first.
    func insertSignInRequest(_ request: SignInRequestRecord, limits: SignInRequestLimits, now: Int64)
        throws(StorageError) -> SignInRequestInsertion

    /// Counts a wrong code typed for the pending request `id`; at the `maximumAttempts`-th the
    /// request is denied (recording `answeringKID`), in the same atomic step.
    func recordWrongCode(id: String, maximumAttempts: Int, answeringKID: String, at time: Int64)
        throws(StorageError) -> WrongCodeOutcome

    /// The request with `id`, in any state.
    func signInRequest(id: String) throws(StorageError) -> SignInRequestRecord?

    /// `user`'s requests that are pending and unexpired at `now`, ordered by position.
    func openSignInRequests(user: String, now: Int64) throws(StorageError) -> [SignInRequestRecord]

    /// `user`'s approved requests of `kind` not collected yet whose expiry is after
    /// `oldestCollectable` (``SignInRequests/collectionCutoff(at:)``), ordered by position: the
    /// approvals a page can still collect.
    func approvedSignInRequests(user: String, kind: SignInRequestKind, expiringAfter oldestCollectable: Int64)
        throws(StorageError) -> [SignInRequestRecord]

    /// Moves a pending, unexpired request to `approved` or `denied`, recording the device and
    /// its methods, in one conditional update.
    ///
    /// With `askingSession`, the id hash of the account page session that made the request,
    /// the update also needs that session in the same transaction (its row read with a share
    /// lock): the one the request names (``SignInRequestRecord/requestedBy``), still stored,
    /// unexpired at `time`, of the request's user, and signed in by a device of that user that
    /// is still active. An approval then answers a session that is there: a sign-out or a
    /// revocation that ends the session first leaves nothing to approve, whatever the clocks of
    /// the two said. Without it, an approval of a `device` or `recovery-codes` request (which a
    /// session makes) matches nothing.
    ///
    /// - Returns: false when the request is not pending any more, or expired, or the asking
    ///   session is gone: of two devices answering at once, exactly one succeeds.
    func answerSignInRequest(
        id: String, status: SignInRequestStatus, answeringKID: String, methods: [String], at time: Int64,
        askingSession: [UInt8]?
    ) throws(StorageError) -> Bool

    /// Approves the `device` request `id` and activates the pending device `kid` it names, in
    /// one transaction: the answer as ``answerSignInRequest(id:status:answeringKID:methods:at:askingSession:)``
    /// gives it, the activation as ``ServerStorage/approvePendingDevice(kid:approvedBy:at:createdAfter:)``
    /// makes it (by `answeringKID`), and the request moved to `issued`, since the activation
    /// uses the approval up. All of it or none: a crash or a failed statement between the steps
    /// cannot leave a request that says "approved" over a device still pending, nor the reverse.
    /// `kid` must be the request's subject and its user's device; a device already active
    /// (approved another way meanwhile) lets the answer stand.
    func approveDeviceSignInRequest(
        id: String, device kid: String, answeringKID: String, methods: [String], at time: Int64,
        askingSession: [UInt8]?, createdAfter oldestLive: Int64
    ) throws(StorageError) -> DeviceRequestApprovalOutcome

    /// Records a poll of the token endpoint at `time`: when it comes less than the request's
    /// interval after the previous poll, the interval grows by `slowDownStep`.
    ///
    /// - Returns: the request as it was before this poll, and whether the poll came too early;
    ///   nil for an unknown id.
    func pollSignInRequest(id: String, at time: Int64, slowDownStep: Int64) throws(StorageError)
        -> (request: SignInRequestRecord, tooEarly: Bool)?

    /// Moves an approved request to `issued`: its token or session is handed out once, and
    /// only while the device that approved it is active and still the request's user's (its
    /// row read with a share lock), so that a revocation or `delete-user` that answered first
    /// leaves nothing to collect, and a key registered again under another name collects
    /// nothing of the old one's.
    ///
    /// Only a request that expires after `oldestCollectable` is collected
    /// (``SignInRequests/collectionCutoff(at:)``): the answer's grace is checked in the same
    /// statement that collects, so a collection whose earlier check passed cannot hand out an
    /// approval after the grace is over.
    ///
    /// The collection records `audit` in its transaction, if given: an entry written after it,
    /// failing, left the client a 503 and a request its retry finds collected.
    ///
    /// - Returns: false when it is not approved (already issued, or never approved), its
    ///   approving device is no longer active or no longer the request's user's, or its grace
    ///   is over.
    func markSignInRequestIssued(id: String, expiringAfter oldestCollectable: Int64, audit: AuditEvent?)
        throws(StorageError) -> Bool

    /// Ends a pending, unexpired request at `time` (its expiry set to
    /// ``ClockSkewCheck/purgeMargin`` before `time`, so that it is expired on every instance's
    /// clock), for a browser that stopped waiting for it: the user's devices no longer list it,
    /// and none can answer it.
    ///
    /// - Returns: whether a request was ended (false when it was answered or expired already).
    @discardableResult
    func withdrawSignInRequest(id: String, at time: Int64) throws(StorageError) -> Bool

    /// Ends, as ``withdrawSignInRequest(id:at:)`` does, every pending request that the account
    /// page session tagged `tag` (``BrowserSessionRecord/requestTag``) made: the session ended,
    /// and what it asked for ends with it.
    func withdrawSignInRequests(requestedBy tag: String, at time: Int64) throws(StorageError)

    /// Deletes requests that expired before `expiredBefore`; returns how many.
    @discardableResult
    func purgeSignInRequests(expiredBefore: Int64) throws(StorageError) -> Int

    // MARK: Browser sessions

    /// Stores a new session.
    func insertBrowserSession(_ session: BrowserSessionRecord) throws(StorageError)

    /// The session whose id hashes to `idHash`, if any (expired ones included: the caller
    /// judges).
    func browserSession(idHash: [UInt8]) throws(StorageError) -> BrowserSessionRecord?

    /// Replaces the session under `idHash` by `session` (a new id: the sign-in completed), in one
    /// step; false when the old one no longer exists.
    func replaceBrowserSession(idHash: [UInt8], with session: BrowserSessionRecord) throws(StorageError) -> Bool

    /// Moves a session's end to `expiresAt` (it was used at `time`), if it is still live at
    /// `time`: the check and the extension are one statement.
    ///
    /// - Returns: false when the session is gone or ended by `time` (nothing changed), so that a
    ///   request never uses a session that another request found expired and ended meanwhile.
    func extendBrowserSession(idHash: [UInt8], until expiresAt: Int64, ifLiveAt time: Int64) throws(StorageError)
        -> Bool

    /// Ends a session.
    func deleteBrowserSession(idHash: [UInt8]) throws(StorageError)

    /// Ends a session if it ended by `time`; one that another request extended meanwhile
    /// stays, with what that request answered.
    func deleteBrowserSession(idHash: [UInt8], expiredAt time: Int64) throws(StorageError)

    /// Deletes sessions that ended before `now`; returns how many.
    @discardableResult
    func purgeBrowserSessions(now: Int64) throws(StorageError) -> Int
}

extension SignInStorage {
    /// ``answerSignInRequest(id:status:answeringKID:methods:at:askingSession:)`` for a request
    /// that no account page session made, or a denial, which needs none. An approval of a
    /// `device` or `recovery-codes` request through it matches nothing and returns false, as
    /// for one already answered: those need their session.
    package func answerSignInRequest(
        id: String, status: SignInRequestStatus, answeringKID: String, methods: [String], at time: Int64
    ) throws(StorageError) -> Bool {
        try answerSignInRequest(
            id: id, status: status, answeringKID: answeringKID, methods: methods, at: time, askingSession: nil)
    }
}

extension SignInStorage {
    /// A collection with no audit entry of its own.
    package func markSignInRequestIssued(id: String, expiringAfter oldestCollectable: Int64) throws(StorageError)
        -> Bool
    {
        try markSignInRequestIssued(id: id, expiringAfter: oldestCollectable, audit: nil)
    }
}
