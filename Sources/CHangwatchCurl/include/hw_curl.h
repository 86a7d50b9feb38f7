// hangwatch's one HTTP client, libcurl called directly and bounded by construction: one timeout
// for the whole exchange, the answer counted as it is written or kept (after decoding, where
// decoding is asked for) and the transfer cut where it passes its limit — libcurl hands the
// answer over 16 KiB at a time and stops when a piece is refused, so a compression bomb or an
// endless chunked answer costs nothing. Redirects are never followed here: the caller sees the
// 3xx and its Location and decides (docs/upload.md, docs/symbol-cache.md).
//
// libcurl is dlopen'ed on the first request, not linked: the hangwatch command line, which
// asks debuginfod servers only when told to, starts without loading libcurl and the TLS
// libraries behind it (docs/performance.md, "7. CLI start-up").
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
    uint8_t *body;        // the kept bytes (hwu_post; the caller frees with hwu_answer_free)
    size_t body_length;   // bytes kept (hwu_post) or written to the file (hwu_get_to_file), decoded
    int cut;              // 1: the server sent more than the limit, decoded; the transfer was cut there
    char redirect[1024];  // Location of a 3xx answer, not followed ("" if none)
    char error[512];      // what failed (HWU_TIMED_OUT, HWU_CONNECT, HWU_FAILED)
} hwu_answer;

/// POSTs `body` to `url` with the given header lines ("Name: value"), within `timeout_ms` in
/// all, keeping at most `answer_limit` bytes of the answer, decoded (gzip, deflate, brotli,
/// zstd are asked for). Returns HWU_*.
int hwu_post(const char *url, const void *body, size_t length, const char *const *headers, size_t header_count,
             long timeout_ms, size_t answer_limit, hwu_answer *answer);

/// GETs `url` within `timeout_ms` in all and writes the body of a 2xx answer to `fd` from its
/// current offset, at most `limit` bytes (past that `cut` is set and the transfer ends). No
/// encoding is asked for and none is decoded: the bytes counted are the bytes written, and a
/// decoder's window never costs memory. The body of any other answer is not written and not
/// kept. Returns HWU_*.
int hwu_get_to_file(const char *url, int fd, long timeout_ms, uint64_t limit, hwu_answer *answer);

void hwu_answer_free(hwu_answer *answer);

#ifdef __cplusplus
}
#endif
