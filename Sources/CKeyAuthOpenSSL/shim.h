#ifndef CKEYAUTH_OPENSSL_SHIM_H
#define CKEYAUTH_OPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/encoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/provider.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/// BIO_get_mem_data is a macro over BIO_ctrl; Swift cannot import it.
static inline long ckeyauth_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// OPENSSL_free is a macro that passes __FILE__/__LINE__ to CRYPTO_free.
static inline void ckeyauth_OPENSSL_free(void *pointer) {
    OPENSSL_free(pointer);
}

#endif

#ifndef CKEYAUTH_OPENSSL_SELECTION
#define CKEYAUTH_OPENSSL_SELECTION
/// EVP_PKEY_PUBLIC_KEY is a macro built from other macros; Swift does not import it.
static inline int ckeyauth_EVP_PKEY_PUBLIC_KEY(void) {
    return EVP_PKEY_PUBLIC_KEY;
}
/// EVP_PKEY_KEYPAIR likewise.
static inline int ckeyauth_EVP_PKEY_KEYPAIR(void) {
    return EVP_PKEY_KEYPAIR;
}
#endif

#ifndef CKEYAUTH_OPENSSL_NAMES
#define CKEYAUTH_OPENSSL_NAMES
/// Some OpenSSL 3 calls keep the name pointer they are given (EVP_PKEY_CTX_new_from_name keeps
/// the key type for later fetches, OSSL_PARAM_BLD keeps parameter names until to_param, and
/// OSSL_DECODER_CTX_new_for_pkey keeps the input type until the decode), so the names must have
/// static storage; a Swift string bridged for one call does not.
static inline const char *ckeyauth_name_RSA(void) { return "RSA"; }
static inline const char *ckeyauth_name_PEM(void) { return "PEM"; }
static inline const char *ckeyauth_name_SHA256(void) { return "SHA256"; }
static inline const char *ckeyauth_name_SHA512(void) { return "SHA512"; }
static inline const char *ckeyauth_param_n(void) { return OSSL_PKEY_PARAM_RSA_N; }
static inline const char *ckeyauth_param_e(void) { return OSSL_PKEY_PARAM_RSA_E; }
#endif

#ifndef CKEYAUTH_OPENSSL_TPM2
#define CKEYAUTH_OPENSSL_TPM2
/// Names for the tpm2 provider's key generation and signing parameters, with static storage for
/// the same reason as above: an OSSL_PARAM array holds the pointers until the call that reads it.
static inline const char *ckeyauth_param_user_auth(void) { return "user-auth"; }
static inline const char *ckeyauth_param_pad_mode(void) { return OSSL_SIGNATURE_PARAM_PAD_MODE; }
static inline const char *ckeyauth_param_digest(void) { return OSSL_SIGNATURE_PARAM_DIGEST; }
static inline const char *ckeyauth_pad_mode_pkcs1(void) { return OSSL_PKEY_RSA_PAD_MODE_PKCSV15; }
#endif

#ifndef CKEYAUTH_OPENSSL_CURVES
#define CKEYAUTH_OPENSSL_CURVES
#include <openssl/ec.h>
#include <openssl/hmac.h>
/// Names for EC P-256 and Ed25519 keys, with static storage for the reasons above: key contexts
/// and parameter builders keep these pointers beyond the call that receives them.
static inline const char *ckeyauth_name_EC(void) { return "EC"; }
static inline const char *ckeyauth_name_ED25519(void) { return "ED25519"; }
static inline const char *ckeyauth_name_P256(void) { return "P-256"; }
static inline const char *ckeyauth_param_group(void) { return OSSL_PKEY_PARAM_GROUP_NAME; }
static inline const char *ckeyauth_param_pub(void) { return OSSL_PKEY_PARAM_PUB_KEY; }
#endif
