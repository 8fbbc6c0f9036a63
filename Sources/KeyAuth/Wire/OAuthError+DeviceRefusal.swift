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
}
