import Foundation
import KeyAuth

// Makes a device key in a (software) TPM and signs one assertion with it. KEYAUTH_URL names the
// issuer the assertion is for; KEYAUTH_TPM_TCTI the TPM (else /dev/tpmrm0).
do {
    let environment = ProcessInfo.processInfo.environment
    let keyDirectory = "/tmp/keyauth-example-key"
    let issuer = environment["KEYAUTH_URL"] ?? "https://auth.example.com"
    let tpm = try TPMConnection.fromEnvironment(environment)  // e.g. swtpm:host=127.0.0.1,port=2321
    let store = KeyPairStore(directory: keyDirectory, keyStore: .tpm(tpm))
    let key = try store.createKey(pin: SecretBytes(utf8: "2468"))  // DeviceKey; the TPM holds the private key
    let assertion = try JWTBuilder(key: key, audience: issuer).sign()  // one TPM signature
    print(assertion)
} catch {
    print("\(error.code): \(error.message)")
}
