#ifndef CKEYAUTH_OPENSSL_SHIM_H
#define CKEYAUTH_OPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

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
#endif
