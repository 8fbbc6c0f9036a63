import KeyAuth

// Makes a device key in a (software) TPM and signs one assertion with it.
do {
    let keyDirectory = "/tmp/keyauth-example-key"
    let issuer = "https://auth.example.com"
    let tpm = try TPMConnection(tcti: "swtpm:host=127.0.0.1,port=2321")  // or TPMConnection.kernelResourceManager
    let store = KeyPairStore(directory: keyDirectory, keyStore: .tpm(tpm))
    let key = try store.createKey(pin: SecretBytes(utf8: "2468"))  // DeviceKey; the TPM holds the private key
    let assertion = try JWTBuilder(key: key, audience: issuer).sign()  // one TPM signature
    print(assertion)
} catch {
    print("\(error.code): \(error.message)")
}
