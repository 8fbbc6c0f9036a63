/*
 * The signature floor: an HTTP server whose every answer costs exactly the cryptography of one
 * keyauth login and nothing else, to measure what any server could reach on this machine.
 *
 *   cc -O2 -o signature-floor Benchmarks/load/signature-floor.c -lmicrohttpd -lcrypto
 *   ./signature-floor PORT RS256|ES256 THREADS
 *
 * For every POST it reads the body, verifies one RS256 signature (what a login pays for the
 * device's assertion) and signs the SHA-256 of the body with the access token's algorithm (RS256:
 * RSA-2048, ES256: P-256), then answers 200 with the signature in hex. No parsing, no claims, no
 * storage, no log: whatever latency and rate it shows under run.sh's load is the machine's, with
 * the same transport library and thread layout as keyauth-server (libmicrohttpd, epoll, one
 * worker per core). GET /healthz answers 200 so that the scripts can wait for it.
 *
 * Keys are made at start: nothing is read from disk, and nothing it signs means anything.
 */
#include <microhttpd.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static EVP_PKEY *token_key;     /* signs the "access token" */
static EVP_PKEY *device_key;    /* verifies the "assertion" */
static unsigned char device_signature[256];
static size_t device_signature_length;
static const unsigned char device_digest[32] = {1, 2, 3};

/* One context of each kind per worker thread, set up once, as keyauth's pools keep them. */
static __thread EVP_PKEY_CTX *sign_context;
static __thread EVP_PKEY_CTX *verify_context;

static EVP_PKEY_CTX *context_for(EVP_PKEY *key, int for_signing) {
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    if (context == NULL) return NULL;
    int ok = for_signing ? EVP_PKEY_sign_init(context) : EVP_PKEY_verify_init(context);
    if (ok == 1 && EVP_PKEY_is_a(key, "RSA")) ok = EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING);
    if (ok == 1) ok = EVP_PKEY_CTX_set_signature_md(context, EVP_sha256());
    if (ok != 1) {
        EVP_PKEY_CTX_free(context);
        return NULL;
    }
    return context;
}

/* The body collected over MHD's calls, then the answer. */
struct request {
    EVP_MD_CTX *hash;
};

static enum MHD_Result answer(struct MHD_Connection *connection, unsigned int status, const char *body) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return MHD_NO;
    enum MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
}

static enum MHD_Result handle(void *unused, struct MHD_Connection *connection, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state) {
    (void)unused, (void)version;
    if (strcmp(method, "POST") != 0) return answer(connection, strcmp(url, "/healthz") == 0 ? 200 : 404, "ok\n");
    struct request *request = *state;
    if (request == NULL) {
        request = calloc(1, sizeof *request);
        if (request == NULL) return MHD_NO;
        /* Handed to MHD at once, so that completed() frees it whatever happens next. */
        *state = request;
        if ((request->hash = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(request->hash, EVP_sha256(), NULL) != 1)
            return MHD_NO;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (EVP_DigestUpdate(request->hash, upload, *upload_size) != 1) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    unsigned char digest[32], signature[512];
    unsigned int digest_length = 0;
    size_t signature_length = sizeof signature;
    if (sign_context == NULL) sign_context = context_for(token_key, 1);
    if (verify_context == NULL) verify_context = context_for(device_key, 0);
    if (sign_context == NULL || verify_context == NULL ||
        EVP_DigestFinal_ex(request->hash, digest, &digest_length) != 1 ||
        EVP_PKEY_verify(verify_context, device_signature, device_signature_length, device_digest,
                        sizeof device_digest) != 1 ||
        EVP_PKEY_sign(sign_context, signature, &signature_length, digest, digest_length) != 1)
        return answer(connection, 500, "crypto failed\n");
    char hex[2 * sizeof signature + 2];
    for (size_t i = 0; i < signature_length; i++) snprintf(hex + 2 * i, 3, "%02x", signature[i]);
    hex[2 * signature_length] = '\n';
    hex[2 * signature_length + 1] = '\0';
    return answer(connection, 200, hex);
}

static void completed(void *unused, struct MHD_Connection *connection, void **state,
                      enum MHD_RequestTerminationCode code) {
    (void)unused, (void)connection, (void)code;
    struct request *request = *state;
    if (request == NULL) return;
    EVP_MD_CTX_free(request->hash);
    free(request);
    *state = NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[2], "RS256") != 0 && strcmp(argv[2], "ES256") != 0)) {
        fprintf(stderr, "usage: signature-floor PORT RS256|ES256 THREADS\n");
        return 64;
    }
    unsigned int port = (unsigned int)atoi(argv[1]), threads = (unsigned int)atoi(argv[3]);
    device_key = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    token_key = strcmp(argv[2], "RS256") == 0 ? EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048)
                                              : EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    EVP_PKEY_CTX *signer = device_key ? context_for(device_key, 1) : NULL;
    device_signature_length = sizeof device_signature;
    if (token_key == NULL || signer == NULL ||
        EVP_PKEY_sign(signer, device_signature, &device_signature_length, device_digest, sizeof device_digest) != 1) {
        fprintf(stderr, "signature-floor: cannot make the keys\n");
        return 1;
    }
    EVP_PKEY_CTX_free(signer);
    /* Blocked before the workers start, so that they inherit the mask and main takes the signal. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    struct MHD_Daemon *daemon =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port, NULL, NULL, handle,
                         NULL, MHD_OPTION_THREAD_POOL_SIZE, threads > 0 ? threads : 1,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (daemon == NULL) {
        fprintf(stderr, "signature-floor: cannot listen on port %u\n", port);
        return 1;
    }
    int signal_number = 0;
    sigwait(&stop, &signal_number);
    MHD_stop_daemon(daemon);
    return 0;
}
