import KeyAuth

/// The `acr_values` of a sign-in (OpenID Connect Core section 3.1.2.1, CIBA Core section 7.1), as
/// far as keyauth knows them, and what they ask of the approving device (PROTOCOL.md section 8,
/// "Authentication context").
///
/// Values keyauth does not know are dropped, as Core lets a provider do with voluntary values:
/// the tokens then state the class the approval achieved. Values it knows are a requirement:
/// only an approval that meets one of them completes the sign-in, so that a relying party asking
/// for an attested device never gets a sign-in by a key file, whether or not it checks `acr`.
struct RequestedAuthenticationContext: Sendable, Hashable {
    /// keyauth's classes asked for, in the order of preference, as stored. A value a newer server
    /// stored and this one does not know stays, and nothing meets it: a requirement is never lost
    /// between instances of different versions.
    let values: [String]

    /// The longest `acr_values` taken, in bytes, as for `state` and `nonce`.
    static let maximumLength = 1024

    /// The values of a stored request.
    init(stored values: [String]) {
        self.values = values
    }

    /// Reads the `acr_values` parameter: keyauth's classes in the order sent, each once; nil when
    /// it is longer than ``maximumLength``.
    init?(parameter text: String?) {
        guard let text else {
            values = []
            return
        }
        guard text.utf8.count <= Self.maximumLength else { return nil }
        var known: [String] = []
        for value in text.split(separator: " ").map(String.init)
        where AuthenticationContextClass(rawValue: value) != nil && !known.contains(value) {
            known.append(value)
        }
        values = known
    }

    /// Whether the request asked for a class keyauth knows.
    var isRequirement: Bool { !values.isEmpty }

    /// The `acr` an approval by a device of `tier` whose statement is `methods` achieves: the
    /// first class asked for that it meets, or without a requirement the class of its statement
    /// (``AuthenticationContextClass/stated(for:)``); nil when it meets none of those asked for.
    func achieved(tier: DeviceTier, methods: [String]) -> String? {
        guard isRequirement else { return AuthenticationContextClass.stated(for: methods).rawValue }
        return values.first { AuthenticationContextClass(rawValue: $0)?.isMet(tier: tier, methods: methods) == true }
    }

    /// Whether a device of `tier` can meet the requirement with some statement.
    func isReachable(by tier: DeviceTier) -> Bool {
        !isRequirement
            || values.contains { AuthenticationContextClass(rawValue: $0)?.isReachable(by: tier) == true }
    }

    /// Why an approval by a device of `tier` stating `methods` does not complete the sign-in, and
    /// what its user can do, for the device that tried.
    func refusal(tier: DeviceTier, methods: [String]? = nil) -> String {
        let wanted = values.map { AuthenticationContextClass(rawValue: $0)?.requirement ?? $0 }
        let statement = methods.map { ", and it states amr \($0.joined(separator: " "))" } ?? ""
        return "this sign-in asks for \(wanted.joined(separator: " or ")) (acr_values "
            + "\(values.joined(separator: " "))); this device's tier is \(tier.rawValue)\(statement): "
            + "approve it on another of your devices that meets it, or ask the application to sign you in without it"
    }
}
