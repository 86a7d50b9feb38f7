// See hw_curl.h.
#include "hw_curl.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// MARK: - libcurl, loaded on first use

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    int loaded;
} hwu_curl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

// The OpenSSL build first (libcurl4), then the GnuTLS one (libcurl3-gnutls, which libdebuginfod
// and most desktops bring): the same easy API.
static void load(void) {
    const char *names[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (library == NULL) continue;
        hwu_curl.global_init = (CURLcode (*)(long))dlsym(library, "curl_global_init");
        hwu_curl.easy_init = (CURL * (*)(void)) dlsym(library, "curl_easy_init");
        hwu_curl.easy_setopt = (CURLcode (*)(CURL *, CURLoption, ...))dlsym(library, "curl_easy_setopt");
        hwu_curl.easy_perform = (CURLcode (*)(CURL *))dlsym(library, "curl_easy_perform");
        hwu_curl.easy_getinfo = (CURLcode (*)(CURL *, CURLINFO, ...))dlsym(library, "curl_easy_getinfo");
        hwu_curl.easy_cleanup = (void (*)(CURL *))dlsym(library, "curl_easy_cleanup");
        hwu_curl.easy_strerror = (const char *(*)(CURLcode))dlsym(library, "curl_easy_strerror");
        hwu_curl.slist_append = (struct curl_slist * (*)(struct curl_slist *, const char *)) dlsym(library, "curl_slist_append");
        hwu_curl.slist_free_all = (void (*)(struct curl_slist *))dlsym(library, "curl_slist_free_all");
        if (hwu_curl.global_init && hwu_curl.easy_init && hwu_curl.easy_setopt && hwu_curl.easy_perform && hwu_curl.easy_getinfo
            && hwu_curl.easy_cleanup && hwu_curl.easy_strerror && hwu_curl.slist_append && hwu_curl.slist_free_all) {
            hwu_curl.global_init(CURL_GLOBAL_DEFAULT);
            hwu_curl.loaded = 1;
            return;
        }
        dlclose(library);
    }
}

static int fail(hwu_answer *answer, int code, const char *text) {
    snprintf(answer->error, sizeof answer->error, "%s", text);
    return code;
}

// MARK: - One exchange

// A transfer set up as every exchange of ours is: HTTP(S) only, no redirect followed, one
// timeout for all of it. `decode`: what libcurl can decode is asked for and decoded as it
// streams. Once any encoding is asked for, libcurl decodes every one it knows, whatever was
// asked: brotli's and zstd's decoders take the window the stream declares (16 MiB, 128 MiB), so
// a transfer that must stay small in memory and on disk asks for none, and what it gets is what
// the server sent, byte for byte.
static CURL *start(const char *url, long timeout_ms, int decode, char *message) {
    CURL *curl = hwu_curl.easy_init();
    if (curl == NULL) return NULL;
    hwu_curl.easy_setopt(curl, CURLOPT_URL, url);
    hwu_curl.easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    hwu_curl.easy_setopt(curl, CURLOPT_USERAGENT, "hangwatch");
    hwu_curl.easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    if (decode) hwu_curl.easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
    hwu_curl.easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    hwu_curl.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    hwu_curl.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
    hwu_curl.easy_setopt(curl, CURLOPT_ERRORBUFFER, message);
    return curl;
}

// The transfer's end as HWU_*, and the status and redirect of the answer, if one came.
static int finish(CURL *curl, CURLcode code, int cut, const char *message, hwu_answer *answer) {
    hwu_curl.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer->status);
    char *location = NULL;
    if (hwu_curl.easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
        snprintf(answer->redirect, sizeof answer->redirect, "%s", location);
    const char *why = message[0] ? message : hwu_curl.easy_strerror(code);
    if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && cut)) return HWU_OK;  // cut by us: the answer is what we kept
    if (code == CURLE_OPERATION_TIMEDOUT) return fail(answer, HWU_TIMED_OUT, why);
    if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_RESOLVE_PROXY)
        return fail(answer, HWU_CONNECT, why);
    return fail(answer, HWU_FAILED, why);
}

// MARK: - POST, the answer kept in memory

struct sink {
    uint8_t *bytes;
    size_t length, limit;
    int cut;
};

// Keeps what fits; refusing a chunk (returning less than it) makes libcurl end the transfer
// with CURLE_WRITE_ERROR before it reads or decodes anything more.
static size_t keep(char *data, size_t size, size_t count, void *context) {
    struct sink *sink = context;
    size_t bytes = size * count;
    size_t room = sink->limit - sink->length;
    size_t kept = bytes < room ? bytes : room;
    memcpy(sink->bytes + sink->length, data, kept);
    sink->length += kept;
    if (kept < bytes) sink->cut = 1;  // more than the limit: stop here
    return kept;
}

int hwu_post(const char *url, const void *body, size_t length, const char *const *headers, size_t header_count,
             long timeout_ms, size_t answer_limit, hwu_answer *answer) {
    memset(answer, 0, sizeof *answer);
    pthread_once(&load_once, load);
    if (!hwu_curl.loaded) return fail(answer, HWU_FAILED, "libcurl is not installed (libcurl.so.4: Debian's libcurl4)");
    struct sink sink = {malloc(answer_limit ? answer_limit : 1), 0, answer_limit, 0};
    if (sink.bytes == NULL) return fail(answer, HWU_FAILED, "out of memory");
    char message[CURL_ERROR_SIZE] = {0};
    CURL *curl = start(url, timeout_ms, 1, message);
    if (curl == NULL) {
        free(sink.bytes);
        return fail(answer, HWU_FAILED, "libcurl could not start a transfer");
    }
    struct curl_slist *list = NULL;
    for (size_t i = 0; i < header_count; i++) list = hwu_curl.slist_append(list, headers[i]);
    hwu_curl.easy_setopt(curl, CURLOPT_POST, 1L);
    hwu_curl.easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    hwu_curl.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)length);
    hwu_curl.easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    hwu_curl.easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep);
    hwu_curl.easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    int result = finish(curl, hwu_curl.easy_perform(curl), sink.cut, message, answer);
    answer->body = sink.bytes;
    answer->body_length = sink.length;
    answer->cut = sink.cut;
    hwu_curl.slist_free_all(list);
    hwu_curl.easy_cleanup(curl);
    return result;
}

// MARK: - GET, the answer written to a file

struct file_sink {
    CURL *curl;
    int fd;
    uint64_t written, limit;
    int cut, failed;
};

// Writes a 2xx answer's decoded bytes while they fit the limit; refuses the first piece that
// does not (libcurl then ends the transfer), and the body of any other answer at once.
static size_t write_out(char *data, size_t size, size_t count, void *context) {
    struct file_sink *sink = context;
    size_t bytes = size * count;
    long status = 0;
    hwu_curl.easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) return bytes;  // read past, never kept: a 3xx or an error page
    if (bytes > sink->limit - sink->written) {
        sink->cut = 1;
        return 0;
    }
    size_t offset = 0;
    while (offset < bytes) {
        ssize_t done = write(sink->fd, data + offset, bytes - offset);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) {
            sink->failed = errno ? errno : EIO;
            return 0;
        }
        offset += (size_t)done;
    }
    sink->written += bytes;
    return bytes;
}

int hwu_get_to_file(const char *url, int fd, long timeout_ms, uint64_t limit, hwu_answer *answer) {
    memset(answer, 0, sizeof *answer);
    pthread_once(&load_once, load);
    if (!hwu_curl.loaded) return fail(answer, HWU_FAILED, "libcurl is not installed (libcurl.so.4: Debian's libcurl4)");
    char message[CURL_ERROR_SIZE] = {0};
    CURL *curl = start(url, timeout_ms, 0, message);
    if (curl == NULL) return fail(answer, HWU_FAILED, "libcurl could not start a transfer");
    struct file_sink sink = {curl, fd, 0, limit, 0, 0};
    // A declared length over the limit ends the transfer before any byte (the decoded count
    // below is what holds whatever the server declares).
    hwu_curl.easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)(limit < INT64_MAX ? limit : INT64_MAX));
    hwu_curl.easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_out);
    hwu_curl.easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    CURLcode code = hwu_curl.easy_perform(curl);
    if (code == CURLE_FILESIZE_EXCEEDED) {
        code = CURLE_WRITE_ERROR;
        sink.cut = 1;
    }
    int result = finish(curl, code, sink.cut, message, answer);
    if (result == HWU_FAILED && sink.failed) snprintf(answer->error, sizeof answer->error, "writing the file: %s", strerror(sink.failed));
    answer->body_length = (size_t)sink.written;
    answer->cut = sink.cut;
    hwu_curl.easy_cleanup(curl);
    return result;
}

void hwu_answer_free(hwu_answer *answer) {
    free(answer->body);
    answer->body = NULL;
    answer->body_length = 0;
}
