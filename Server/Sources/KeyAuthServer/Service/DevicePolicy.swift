import KeyAuth

/// Which devices may register and log in, by tier (`--device-policy`), and whether a device
/// below it is refused or only reported (`--device-policy-mode`).
///
/// `monitor` lets an operator see who a stricter policy would refuse (a log line and
/// `keyauth_device_policy_refusals_total{mode="monitor"}` per refusal that did not happen) before
/// turning it on; `enforce` refuses, with an answer that says why and what to do.
package struct DevicePolicy: Sendable, Equatable {
    /// The weakest tier admitted.
    package enum Level: String, Sendable, CaseIterable {
        /// Every device: key files too (the default).
        case any
        /// Keys in a TPM that answered credential activation: `tpm-unverified` or `attested`.
        case tpm
        /// Keys in a TPM whose endorsement key certificate chains to a `--tpm-ca` root.
        case attested

        var minimumRank: Int {
            switch self {
            case .any: 0
            case .tpm: DeviceTier.tpmUnverified.rank
            case .attested: DeviceTier.attested.rank
            }
        }
    }

    /// What happens to a device below the level.
    package enum Mode: String, Sendable, CaseIterable {
        /// Logged and counted, and let through.
        case monitor
        /// Refused.
        case enforce
    }

    package var level: Level = .any
    package var mode: Mode = .enforce

    package init(level: Level = .any, mode: Mode = .enforce) {
        self.level = level
        self.mode = mode
    }

    /// Whether a device of `tier` meets the level.
    package func admits(_ tier: DeviceTier) -> Bool {
        tier.rank >= level.minimumRank
    }

    /// Why a device of `tier` is refused, and what its owner can do about it.
    package func refusal(of tier: DeviceTier, at event: String) -> String {
        let wanted =
            level == .attested
            ? "a key in a TPM whose maker this server trusts (tier attested)"
            : "a key in a TPM (tier tpm-unverified or attested)"
        let what = event == "ssh-certificate" ? "SSH certificate" : event
        let refused =
            "this server's device policy (\(level.rawValue)) refuses the \(what) of this device: its tier is "
            + "\(tier.rawValue), and the policy needs \(wanted); "
        // A registered device whose key is in a TPM can prove it without a new key: it may have
        // registered before attestation, or before this server trusted its TPM's maker. Kept
        // under the 300 characters a client shows of a description.
        guard event == "registration" else {
            return refused + "run `keyauth attest` if the key is in a TPM, else register again with "
                + "`keyauth register --key-store tpm`"
        }
        return refused + "register this machine again with `keyauth register --key-store tpm`"
            + (level == .attested ? ", on a machine whose TPM has an endorsement key certificate" : "")
    }
}

/// Reports what a policy in `monitor` mode let through, and what `enforce` refused: a log line and
/// a counter per event, so that the operator sees the effect of a policy before and after.
package struct DevicePolicyReporter: Sendable {
    /// Writes one line to the server's log.
    let log: @Sendable (String) -> Void
    /// Counts one event by where it happened (`registration`, `login`) and the mode.
    let count: @Sendable (_ at: String, _ mode: DevicePolicy.Mode) -> Void

    /// Reports nothing: for services composed without a log (tests of other features).
    static let silent = DevicePolicyReporter(log: { _ in }, count: { _, _ in })
}

extension KeyAuthService {
    /// Applies the device policy to `tier` at `event` (`registration` or `login`) of device
    /// `kid` of `user`.
    ///
    /// - Throws: ``ServiceError`` `.accessDenied` under `enforce` when the tier is below the
    ///   level, saying why and what to do; under `monitor` it only reports.
    func applyDevicePolicy(_ tier: DeviceTier, at event: String, kid: String, user: String) throws(ServiceError) {
        let policy = settings.devicePolicy
        guard !policy.admits(tier) else { return }
        settings.devicePolicyReporter.count(event, policy.mode)
        let verdict = policy.mode == .monitor ? "would refuse" : "refused"
        settings.devicePolicyReporter.log(
            "device policy \(policy.level.rawValue) (\(policy.mode.rawValue)) \(verdict) the \(event) of device "
                + "\(kid) of \(user): tier \(tier.rawValue)")
        if policy.mode == .enforce {
            throw ServiceError(.accessDenied, policy.refusal(of: tier, at: event))
        }
    }
}
