#ifndef CKEYAUTH_CURL_SHIM_H
#define CKEYAUTH_CURL_SHIM_H

#include <stddef.h>
#include <curl/curl.h>

/// The callbacks of one transfer, each given the same context pointer.
typedef size_t (*ckeyauth_curl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*ckeyauth_curl_progress_callback)(
    void *context, curl_off_t download_total, curl_off_t downloaded, curl_off_t upload_total, curl_off_t uploaded);

/// curl_easy_setopt is variadic; Swift cannot call it. This is the one place a request's options
/// are set, each with a typed parameter, because the variadic list reads every value by its
/// exact C type.
///
/// - Only http and https, and no redirect is followed (a 3xx comes back as it is).
/// - `timeout_ms` bounds the whole exchange (0: none), connecting included.
/// - No signals (the transfer runs on a thread of its own), no `Expect: 100-continue` wait.
/// - `body` (may be NULL with length 0) is not copied: it must outlive the transfer.
/// - `bypass_proxy` ignores `http_proxy` and the like: a loopback server is reached directly.
/// - `method` is GET, POST, or any other, sent as it is.
/// - `error_buffer` has room for CURL_ERROR_SIZE bytes.
static inline CURLcode ckeyauth_curl_prepare(
    CURL *handle,
    const char *url,
    const char *method,
    const char *body,
    long body_length,
    struct curl_slist *headers,
    long timeout_ms,
    int bypass_proxy,
    ckeyauth_curl_data_callback write_body,
    ckeyauth_curl_data_callback write_header,
    ckeyauth_curl_progress_callback progress,
    void *context,
    char *error_buffer)
{
    CURLcode code = CURLE_OK;
#define CKEYAUTH_SET(option, value) \
    if (code == CURLE_OK) code = curl_easy_setopt(handle, option, value)
    CKEYAUTH_SET(CURLOPT_ERRORBUFFER, error_buffer);
    CKEYAUTH_SET(CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
    CKEYAUTH_SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
    CKEYAUTH_SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    CKEYAUTH_SET(CURLOPT_FOLLOWLOCATION, 0L);
    CKEYAUTH_SET(CURLOPT_NOSIGNAL, 1L);
    CKEYAUTH_SET(CURLOPT_TIMEOUT_MS, timeout_ms);
    CKEYAUTH_SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    CKEYAUTH_SET(CURLOPT_HTTPHEADER, headers);
    if (bypass_proxy) CKEYAUTH_SET(CURLOPT_NOPROXY, "*");
    CKEYAUTH_SET(CURLOPT_WRITEFUNCTION, write_body);
    CKEYAUTH_SET(CURLOPT_WRITEDATA, context);
    CKEYAUTH_SET(CURLOPT_HEADERFUNCTION, write_header);
    CKEYAUTH_SET(CURLOPT_HEADERDATA, context);
    CKEYAUTH_SET(CURLOPT_XFERINFOFUNCTION, progress);
    CKEYAUTH_SET(CURLOPT_XFERINFODATA, context);
    CKEYAUTH_SET(CURLOPT_NOPROGRESS, 0L);
    if (body != NULL) {
        CKEYAUTH_SET(CURLOPT_POSTFIELDSIZE, body_length);
        CKEYAUTH_SET(CURLOPT_POSTFIELDS, body);
    } else {
        CKEYAUTH_SET(CURLOPT_HTTPGET, 1L);
    }
    CKEYAUTH_SET(CURLOPT_CUSTOMREQUEST, method);
#undef CKEYAUTH_SET
    return code;
}

/// curl_easy_getinfo is variadic; Swift cannot call it. The status of the last answer, 0 when
/// none came.
static inline long ckeyauth_curl_response_code(CURL *handle)
{
    long status = 0;
    if (curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK) return 0;
    return status;
}

/// curl_easy_getinfo is variadic. The errno of the last failed connect (ECONNREFUSED, say), 0
/// when there was none: libcurl's own message does not always name it.
static inline long ckeyauth_curl_os_errno(CURL *handle)
{
    long number = 0;
    if (curl_easy_getinfo(handle, CURLINFO_OS_ERRNO, &number) != CURLE_OK) return 0;
    return number;
}

/// The size the error buffer handed to ckeyauth_curl_prepare must have.
static inline size_t ckeyauth_curl_error_size(void) { return CURL_ERROR_SIZE; }

#endif
