import KeyAuth

/// `keyauth pubkey`: the device's public key, which needs no PIN.
struct PubkeyCommand {
    let context: CommandContext
    let options: PubkeyOptions

    func run() throws(KeyAuthError) {
        let accounts = try context.accountStore()
        let name = try AccountSession.resolve(accounts, options.account)
        _ = try accounts.load(name)
        let keys = try accounts.keyPairStore(for: name)
        let publicKey: RSAPublicKey
        do {
            publicKey = try keys.loadPublicKey()
        } catch {
            guard error.code == .keyNotFound else { throw error }
            throw KeyAuthError(.accountCorrupt, "account \(name) has no public key file \(keys.publicKeyPath)")
        }
        if options.jwk {
            let jwk = publicKey.jwk.jsonValue(extra: [
                "kid": .string(publicKey.fingerprint), "alg": "RS256", "use": "sig",
            ])
            context.io.printOutput(jwk.serialized(leadingKeys: ["kty", "kid", "alg", "use", "e", "n"]))
        } else {
            let pem = publicKey.pemRepresentation
            context.io.writeOutput(pem.hasSuffix("\n") ? pem : pem + "\n")
        }
    }
}
