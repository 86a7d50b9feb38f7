// See hw_curl.h.
#include "hw_curl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int fail(hwu_answer *answer, int code, const char *text) {
    snprintf(answer->error, sizeof answer->error, "%s", text);
    return code;
}

int hwu_post(const char *url, const void *body, size_t length, const char *const *headers, size_t header_count,
             long timeout_ms, size_t answer_limit, hwu_answer *answer) {
    memset(answer, 0, sizeof *answer);
    pthread_once(&global_once, global_init);
    struct sink sink = {malloc(answer_limit ? answer_limit : 1), 0, answer_limit, 0};
    if (sink.bytes == NULL) return fail(answer, HWU_FAILED, "out of memory");
    CURL *curl = curl_easy_init();
    if (curl == NULL) {
        free(sink.bytes);
        return fail(answer, HWU_FAILED, "libcurl could not start a transfer");
    }
    struct curl_slist *list = NULL;
    for (size_t i = 0; i < header_count; i++) list = curl_slist_append(list, headers[i]);
    char message[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)length);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "hangwatch");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");  // what libcurl can decode, decoded as it streams
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);          // threads: no SIGALRM for DNS timeouts
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, message);
    CURLcode code = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer->status);
    char *location = NULL;
    if (curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
        snprintf(answer->redirect, sizeof answer->redirect, "%s", location);
    int result = HWU_OK;
    if (code == CURLE_WRITE_ERROR && sink.cut) {
        result = HWU_OK;  // we cut it: the answer is what we kept
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
        result = fail(answer, HWU_TIMED_OUT, message[0] ? message : curl_easy_strerror(code));
    } else if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_RESOLVE_PROXY) {
        result = fail(answer, HWU_CONNECT, message[0] ? message : curl_easy_strerror(code));
    } else if (code != CURLE_OK) {
        result = fail(answer, HWU_FAILED, message[0] ? message : curl_easy_strerror(code));
    }
    answer->body = sink.bytes;
    answer->body_length = sink.length;
    answer->cut = sink.cut;
    curl_slist_free_all(list);
    curl_easy_cleanup(curl);
    return result;
}

void hwu_answer_free(hwu_answer *answer) {
    free(answer->body);
    answer->body = NULL;
    answer->body_length = 0;
}
