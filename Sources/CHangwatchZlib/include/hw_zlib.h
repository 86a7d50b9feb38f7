// gzip for report uploads (Crashpad sends its multipart body gzip-encoded when asked) and pprof
// profiles; owned by HangwatchReport (Gzip.swift).
#pragma once
#include <stddef.h>
#include <stdint.h>

/// An upper bound of hwz_gzip's output for `length` input bytes.
size_t hwz_gzip_bound(size_t length);

/// Compresses `input` into `output` as one gzip member (RFC 1952). Returns the number of
/// bytes written, or 0 when `capacity` was too small or zlib failed.
size_t hwz_gzip(const uint8_t *input, size_t length, uint8_t *output, size_t capacity);
