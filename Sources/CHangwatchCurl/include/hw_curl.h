// One HTTP POST through libcurl, bounded by construction (docs/upload.md): the answer is kept
// up to a limit as it streams in, decoded (gzip, deflate), and the transfer is cut when the
// limit is reached — libcurl calls the write callback with at most 16 KiB at a time and stops
// when it refuses one, so nothing is queued whatever the server sends. One timeout bounds the
// whole exchange. Redirects are never followed. Only hangwatch-upload and HangwatchUpload's
// users link it.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// How an exchange ended.
enum {
    HWU_OK = 0,           // an answer came (any status); `cut` says whether it was longer than kept
    HWU_TIMED_OUT = 1,    // no complete answer within the timeout
    HWU_CONNECT = 2,      // could not connect (refused, unreachable, DNS)
    HWU_FAILED = 3,       // anything else: `error` says what
};

typedef struct hwu_answer {
    long status;          // HTTP status, 0 when none came
    uint8_t *body;        // the kept bytes (caller frees with hwu_answer_free)
    size_t body_length;
    int cut;              // 1: the server sent more than the limit; the transfer was cut there
    char redirect[1024];  // Location of a 3xx answer, not followed ("" if none)
    char error[512];      // what failed (HWU_TIMED_OUT, HWU_CONNECT, HWU_FAILED)
} hwu_answer;

/// POSTs `body` to `url` with the given header lines ("Name: value"), within `timeout_ms` in
/// all, keeping at most `answer_limit` bytes of the decoded answer. Returns HWU_*.
int hwu_post(const char *url, const void *body, size_t length, const char *const *headers, size_t header_count,
             long timeout_ms, size_t answer_limit, hwu_answer *answer);

void hwu_answer_free(hwu_answer *answer);

#ifdef __cplusplus
}
#endif
