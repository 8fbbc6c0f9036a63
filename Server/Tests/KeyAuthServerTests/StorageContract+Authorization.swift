import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// The storage contract of the OpenID Connect provider (``AuthorizationStorage``) and of the
/// relying parties' client columns, on every backend.
extension StorageContract {
    static let authorizationChecks: [StorageCheck] = [
        StorageCheck(
            "keeps a relying party's redirect URIs, post-logout URIs and public flag",
            StorageContract.storesRelyingParties),
        StorageCheck(
            "redeems a code once, tells a second redemption the first token, revokes and purges",
            StorageContract.redeemsAuthorizationCodes),
        StorageCheck(
            "settles concurrent redemptions of one code across instances with one winner",
            StorageContract.racesAuthorizationCodes),
        StorageCheck(
            "redeems no code past its expiry or of an approving device no longer active",
            StorageContract.refusesStaleAuthorizationCodes),
    ]

    static func authorizationCode(_ seed: UInt8, expiresAt: Int64 = 1_060) -> AuthorizationCodeRecord {
        AuthorizationCodeRecord(
            codeHash: [UInt8](repeating: seed, count: 32), clientID: "client-1",
            redirectURI: "https://wiki.example.org/callback?x=1", codeChallenge: "challenge", nonce: "nönce",
            scope: "openid profile", user: "alice", approvingKID: "kid-1", authTime: 990, methods: ["swk", "pin"],
            sessionID: "sid-1", expiresAt: expiresAt, acr: seed == 1 ? "urn:keyauth:acr:attested" : nil)
    }

    static func storesRelyingParties(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let party = ClientRecord(
            id: "rp-1", name: "Wiki", secretHash: [], createdAt: 10,
            redirectURIs: ["https://wiki.example.org/cb", "http://127.0.0.1/cb"],
            postLogoutRedirectURIs: ["https://wiki.example.org/bye"], isPublic: true)
        let ciba = ClientRecord(id: "ciba-1", name: "Desk", secretHash: [1, 2, 3], createdAt: 20)
        #expect(try storage.insertClient(party))
        #expect(try storage.insertClient(ciba))
        #expect(try storage.client(id: "rp-1") == party)
        #expect(try storage.client(id: "ciba-1") == ciba)
        #expect(try storage.client(id: "ciba-1")?.redirectURIs == [])
    }

    static func redeemsAuthorizationCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        let code = authorizationCode(1)
        try storage.insertAuthorizationCode(code)
        #expect(try storage.authorizationCode(codeHash: code.codeHash) == code)
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: code.codeHash, at: 1_010, accessTokenJTI: "jti-1", accessTokenExpiresAt: 1_910)
                == .redeemed(code))
        var redeemed = code
        redeemed.redeemedAt = 1_010
        redeemed.accessTokenJTI = "jti-1"
        redeemed.accessTokenExpiresAt = 1_910
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: code.codeHash, at: 1_020, accessTokenJTI: "jti-2", accessTokenExpiresAt: 1_920)
                == .alreadyRedeemed(redeemed))
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: [UInt8](repeating: 9, count: 32), at: 1_020, accessTokenJTI: "jti-3",
                accessTokenExpiresAt: 1_920) == .unknown)

        #expect(try !storage.isAccessTokenRevoked(jti: "jti-1"))
        try storage.revokeAccessToken(jti: "jti-1", expiresAt: 1_910)
        try storage.revokeAccessToken(jti: "jti-1", expiresAt: 1_910)
        #expect(try storage.isAccessTokenRevoked(jti: "jti-1"))

        // An unredeemed code goes after its expiry; a redeemed one once its token expired too.
        try storage.insertAuthorizationCode(authorizationCode(2))
        #expect(try storage.purgeAuthorizations(now: 1_061) == 1)
        #expect(try storage.authorizationCode(codeHash: code.codeHash) == redeemed)
        #expect(try storage.purgeAuthorizations(now: 1_911) == 2)
        #expect(try storage.authorizationCode(codeHash: code.codeHash) == nil)
        #expect(try !storage.isAccessTokenRevoked(jti: "jti-1"))
    }

    static func racesAuthorizationCodes(_ database: StorageContractDatabase) throws {
        let first = try database.open()
        defer { first.close() }
        let second = try database.open()
        defer { second.close() }
        #expect(try first.insertDevice(device("kid-1", status: .active)))
        let code = authorizationCode(5)
        try first.insertAuthorizationCode(code)
        let redemptions = runConcurrently(24) { (index: Int) throws(StorageError) -> AuthorizationCodeRedemption in
            try (index.isMultiple(of: 2) ? first : second).redeemAuthorizationCode(
                codeHash: code.codeHash, at: 1_010, accessTokenJTI: "jti-\(index)", accessTokenExpiresAt: 1_910)
        }
        let results = try redemptions.map { try $0.get() }
        #expect(results.filter { if case .redeemed = $0 { true } else { false } }.count == 1)
        // Every loser learns the winner's token.
        let winner = try #require(try first.authorizationCode(codeHash: code.codeHash)?.accessTokenJTI)
        for result in results {
            if case .alreadyRedeemed(let record) = result { #expect(record.accessTokenJTI == winner) }
        }
    }

    static func refusesStaleAuthorizationCodes(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        #expect(try storage.insertDevice(device("kid-1", status: .active)))
        let late = authorizationCode(7)
        try storage.insertAuthorizationCode(late)
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: late.codeHash, at: late.expiresAt, accessTokenJTI: "jti-7", accessTokenExpiresAt: 1_960)
                == .unknown)
        #expect(try storage.authorizationCode(codeHash: late.codeHash)?.redeemedAt == nil)

        // The approving device revoked after the code was made: the code stays unredeemed.
        let orphaned = authorizationCode(8)
        try storage.insertAuthorizationCode(orphaned)
        #expect(try storage.updateStatus(kid: "kid-1", from: .active, to: .revoked, at: 1_005))
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: orphaned.codeHash, at: 1_010, accessTokenJTI: "jti-8", accessTokenExpiresAt: 1_910)
                == .approverInactive)
        #expect(try storage.authorizationCode(codeHash: orphaned.codeHash)?.redeemedAt == nil)

        // A key registered again under another user's name does not approve for the first.
        var others = authorizationCode(9)
        others.approvingKID = "kid-bob"
        try storage.insertAuthorizationCode(others)
        #expect(try storage.insertDevice(device("kid-bob", user: "bob", status: .active)))
        #expect(
            try storage.redeemAuthorizationCode(
                codeHash: others.codeHash, at: 1_010, accessTokenJTI: "jti-9", accessTokenExpiresAt: 1_910)
                == .approverInactive)
    }
}
