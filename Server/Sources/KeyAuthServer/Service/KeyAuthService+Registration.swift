import KeyAuth

/// What a registration did.
enum RegistrationOutcome: Sendable, Equatable {
    /// A new active device (201).
    case active(DeviceRecord)
    /// A new device waiting for approval (202).
    case pending(DeviceRecord)
    /// The same key was already registered to the same user (200, idempotent).
    case existing(DeviceRecord)
    /// The attestation holds and the TPM must answer this challenge; nothing is stored (202).
    case activationRequired(ActivationChallenge)

    /// Whether a device was stored by this registration.
    var isNew: Bool {
        switch self {
        case .active, .pending: true
        case .existing, .activationRequired: false
        }
    }

    /// The device, when one was stored or found.
    var device: DeviceRecord? {
        switch self {
        case .active(let device), .pending(let device), .existing(let device): device
        case .activationRequired: nil
        }
    }
}

extension KeyAuthService {
    /// Registers a device key (PROTOCOL.md section 4, "Register").
    ///
    /// Order matters: the cheap syntax checks, then proof of possession (so that nobody can
    /// learn anything about a key they do not hold), then the registry, and the enrollment code
    /// is used up only when the device is about to be stored.
    ///
    /// - Parameter address: the client address the request came from, kept with the device so
    ///   that whoever approves it can see where it came from.
    func register(_ request: RegistrationRequest, from address: String) throws -> RegistrationOutcome {
        if request.publicKeyPEM.contains("PRIVATE KEY") {
            // Refused before parsing; the text is never stored or logged.
            throw ServiceError(.invalidRequest, "a private key was sent; send only the public key")
        }
        let key: RSAPublicKey
        do {
            key = try RSAPublicKey(pemRepresentation: Array(request.publicKeyPEM.utf8))
            try key.checkPolicy(allowedBits: Self.allowedKeyBits)
        } catch {
            let reason = error.code == .keyRejected ? error.message : "it is not an SPKI PEM RSA public key"
            throw ServiceError(.invalidRequest, "the public key is not accepted: \(reason)")
        }
        let kid = key.fingerprint
        // Proof of possession: an assertion signed by the submitted key, whose kid is that key's
        // fingerprint (any other kid names a key nobody registered here).
        let proof = try parseAssertion(request.proof)
        guard proof.keyID == kid else { throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure) }
        let verifiedProof = try verifyAssertion(proof, key: key)
        // Used up before anything can refuse the request (the attestation, the device policy): a
        // proof the server saw and left unused would log in as a device that holds this key.
        try claimJWTID(of: verifiedProof)
        var tier = DeviceTier.software
        var attestationDetail: String?
        if let attestation = request.attestation {
            switch try checkAttestation(attestation, key: key) {
            case .challenge(let challenge):
                return .activationRequired(challenge)
            case .passed(let attestedTier, let problem):
                tier = attestedTier
                attestationDetail = attestedTier.rawValue + (problem.map { ": \($0)" } ?? "")
            }
        }
        try applyDevicePolicy(tier, at: "registration", kid: kid, user: request.user)

        if let existing = try storage.device(kid: kid) {
            return try existingOutcome(existing, user: request.user)
        }
        var device = DeviceRecord(
            kid: kid, user: request.user, name: request.name, publicKeyPEM: key.pemRepresentation, status: .pending,
            createdAt: now(), registeredFrom: address, tier: tier, keyProtection: request.keyProtection)
        // A code is used up by the insert itself, in its transaction: used up first, on its own,
        // a `delete-user` in between would leave the deleted user an active device.
        var code: DeviceEnrollmentCode?
        if let typed = request.enrollmentCode {
            code = .enrollment(hashes: try EnrollmentCodes.storedForms(of: typed))
        }
        // A recovery code works as an enrollment code does, from the user's own set.
        if let typed = request.recoveryCode {
            guard let matched = try recoveryCodes.match(typed, user: request.user) else {
                throw Self.codeRefusal(request)
            }
            code = .recovery(
                code: matched, notice: try signIn.recoveryNotice(of: device, from: address),
                audit: recoveryAudit(of: device, from: address))
            // No more than the device that made the codes: a key without a PIN could make codes
            // that enrol a key claiming one, as it could approve one.
            device.keyProtection = KeyProtection.lesser(device.keyProtection, matched.keyProtection)
        }
        // The rule depends on what the user has, which a concurrent registration may change
        // between this read and the insert; the insert checks the rule again atomically, and a
        // refusal because the user appeared meanwhile decides again from the new state.
        for _ in 0..<3 {
            let rule = try insertRule(for: &device, code: code)
            guard let outcome = try store(device, rule: rule, request: request) else { continue }
            // Its notice is stored (PROTOCOL.md section 4): the long polls of the user's devices
            // show it at once. Every such enrolment gets its notice, outside the limits of
            // sign-in requests (``SignInRequests/Settings/noticeLimits`` says why).
            if request.recoveryCode != nil, case .active = outcome { signIn.wakeWatchers(of: device.user) }
            if let attestationDetail, outcome.isNew {
                try AuditTrail(storage: storage, now: now).record(
                    .attest, by: .device(kid: kid), user: device.user, subject: kid, detail: attestationDetail)
            }
            return outcome
        }
        throw StorageError(.queryFailed, "the user's devices kept changing during registration")
    }

    /// The refusal of the registration's code: unknown, used, expired, another user's, or the
    /// user's gone.
    private static func codeRefusal(_ request: RegistrationRequest) -> ServiceError {
        ServiceError(
            .accessDenied,
            request.recoveryCode != nil
                ? "the recovery code is not valid for this user" : "the enrollment code is not valid for this user")
    }

    /// The audit entry of a device enrolled with a recovery code, stored with the device
    /// (``DeviceEnrollmentCode/recovery(code:notice:audit:)``, which adds the codes left): the
    /// device and its address.
    private func recoveryAudit(of device: DeviceRecord, from address: String) -> AuditEvent {
        AuditEvent(
            time: now(), action: .useRecoveryCode, actor: AuditActor.device(kid: device.kid).description,
            user: device.user, subject: device.kid, detail: "\(device.name), from \(address)")
    }

    /// RSA sizes a device key may have; the signatures they make are 256 to 1024 bytes.
    static let allowedKeyBits = 2048...8192

    /// Decides whether `device` starts active or pending, and under which condition it may be
    /// stored (PROTOCOL.md section 4, "Register").
    ///
    /// - A valid enrollment code: active, always.
    /// - A user with an active device: pending, under the cap of pending devices.
    /// - A user with records but no active device (all revoked, say): refused. Nobody is left to
    ///   approve, and handing the name to the first asker would give a stranger the account.
    /// - A new user: active under open enrollment, if still new when stored; else refused.
    /// - Throws: ``ServiceError`` `.accessDenied` when a code is needed.
    private func insertRule(for device: inout DeviceRecord, code: DeviceEnrollmentCode?) throws -> DeviceInsertRule {
        if let code {
            device.status = .active
            device.approvedAt = device.createdAt
            return .usingCode(code)
        }
        let statuses = try storage.deviceStatuses(user: device.user)
        if statuses.contains(.active) {
            device.status = .pending
            device.approvedAt = nil
            return .pendingBelow(
                limit: settings.maximumPendingDevices, createdAfter: device.createdAt - registry.pendingLifetime)
        }
        guard statuses.isEmpty else {
            throw ServiceError(
                .accessDenied,
                "this user has no active device to approve a new one; "
                    + "registering needs an enrollment code from the administrator")
        }
        guard settings.enrollment == .open else {
            throw ServiceError(.accessDenied, "an enrollment code is required to register a first device")
        }
        device.status = .active
        device.approvedAt = device.createdAt
        return .userHasNoDevices
    }

    /// Stores `device` under `rule` and turns the storage's answer into the registration's.
    ///
    /// - Returns: nil when the user turned out to have devices after all (`.userHasNoDevices`
    ///   failed), so that the caller decides again.
    /// - Throws: 429 `slow_down` when the user's pending devices are at the cap, with
    ///   `Retry-After` set to when the oldest of them expires.
    private func store(
        _ device: DeviceRecord, rule: DeviceInsertRule, request: RegistrationRequest
    ) throws -> RegistrationOutcome? {
        switch try storage.insertDevice(device, rule: rule) {
        case .codeNotUsable:
            throw Self.codeRefusal(request)
        case .inserted:
            return device.status == .active ? .active(device) : .pending(device)
        case .kidTaken:
            // Another request registered the same key in between.
            guard let existing = try storage.device(kid: device.kid) else {
                throw StorageError(.queryFailed, "a device vanished during registration")
            }
            return try existingOutcome(existing, user: device.user)
        case .userHasDevices:
            return nil
        case .pendingLimitReached(let oldestCreatedAt):
            let retryAfter = oldestCreatedAt.addingSaturating(registry.pendingLifetime).subtractingSaturating(now())
            throw ServiceError(
                .slowDown(retryAfter: Int(clamping: max(retryAfter, 1))),
                "this user already has \(settings.maximumPendingDevices) devices waiting for approval; "
                    + "retry when one is approved, denied or expired")
        }
    }

    /// The answer for a key that is already registered: idempotent for its user, a conflict
    /// for anyone else, and `expired_token` for a pending registration that timed out (the
    /// client must start over with a new key).
    private func existingOutcome(_ existing: DeviceRecord, user: String) throws(ServiceError) -> RegistrationOutcome {
        guard existing.user == user else {
            throw ServiceError(.keyConflict, "this key is registered to another user")
        }
        if isExpiredPending(existing) {
            throw ServiceError(.expiredToken, "the pending registration of this key expired; register a new key")
        }
        return .existing(existing)
    }
}
