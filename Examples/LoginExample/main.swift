import Foundation
import KeyAuth

// Logs in to a keyauth server with a device key, registering one the first time. Against a
// local server: KEYAUTH_URL=http://127.0.0.1:PORT KEYAUTH_USER=alice KEYAUTH_ENROLLMENT_CODE=CODE
// (from `keyauth-server enroll alice`; only the user's first device needs one).
do {
    let environment = ProcessInfo.processInfo.environment
    let serverURL = environment["KEYAUTH_URL"] ?? "https://auth.example.com"
    let client = try KeyAuthClient(serverURL: serverURL)  // http:// only on loopback
    let issuer = try await client.discover().issuer
    let tpm = try TPMConnection.fromEnvironment(environment)  // KEYAUTH_TPM_TCTI, else device:/dev/tpmrm0
    // New keys in the TPM when one answers, in a key file otherwise; an existing key is found by
    // its file. The directory is $XDG_DATA_HOME/myapp/device-key, else ~/.local/share/... ($HOME).
    let store = try KeyPairStore.default(appName: "myapp", environment: environment, keyStore: .automatic(tpm))
    let presence = PINPresence(reader: TerminalSecretReader(), attemptsFile: store.pinAttemptsPath)

    // The bundled client supplies the hooks: register with a proof of possession, log in with
    // the JWT bearer grant, poll while another device has to approve this one.
    var enrollment = DeviceEnrollment(
        user: environment["KEYAUTH_USER"] ?? "alice", deviceName: environment["KEYAUTH_DEVICE_NAME"] ?? "laptop",
        enrollmentCode: environment["KEYAUTH_ENROLLMENT_CODE"])
    // The PIN opens the key: say so, or the server counts it as a key without one (no host login).
    enrollment.keyProtection = .pin
    let hooks = client.authenticatorHooks(enrollment: enrollment)
    let authenticator = Authenticator<AccessToken>(
        store: store, presence: presence, configuration: .init(audience: issuer), hooks: hooks)

    Task {
        for await state in authenticator.stateUpdates() { print(state) }  // checking presence, generating key, ...
    }
    let token = try await authenticator.login()  // or authenticator.start { result in ... }
    print("logged in until \(token.expiresAt)")
} catch {
    print("login failed: \(error.code): \(error.message)")
}
