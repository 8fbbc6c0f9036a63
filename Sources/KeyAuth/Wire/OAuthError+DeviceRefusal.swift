extension OAuthError {
    /// Whether the server refuses this device key for good (revoked, or unknown to it), as
    /// opposed to refusing one assertion for a rule of the moment.
    ///
    /// Both are `invalid_grant`. A server describes an unknown key, a bad signature and a revoked
    /// device with one uniform text, so that keys cannot be probed (PROTOCOL.md section 2), and
    /// every other failed check with that text followed by the rule: an assertion signed in the
    /// seconds after the server restarted from a crash, a clock that is off, a wrong audience.
    /// Only the first means that the device should be forgotten here; telling its user to reset
    /// a good device because the server restarted would cost them their registration.
    package var refusesDeviceKey: Bool {
        guard error == .invalidGrant else { return false }
        guard let errorDescription else { return true }
        return errorDescription == DeviceAssertionVerifier.uniformFailure
    }

    /// Whether keyauth-server says that this device's registration is over and the device will
    /// never log in: it was denied (a 400 `access_denied`, the answer to a denied device's login)
    /// or expired before anyone approved it (`expired_token`). Its key is then of no use, and
    /// whoever holds it can forget it without revoking anything.
    ///
    /// A 403 `access_denied` is not such an answer: it refuses one request for a rule (a wrong
    /// enrollment code, or a `--device-policy` that an active device does not meet), and the
    /// device may stay active on the server. Nor is an answer without keyauth-server's OAuth body
    /// (a proxy's page), which says nothing about the device at all.
    public var endsRegistration: Bool {
        guard isFromBody else { return false }
        return error == .expiredToken || (error == .accessDenied && statusCode == 400)
    }
}
