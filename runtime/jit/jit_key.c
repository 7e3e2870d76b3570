/* jit_key.c: the fusion key (numerics 5): XXH3-128 over an unambiguous encoding of its inputs. */
#include "jit_key.h"

#include <stdint.h>
#include <string.h>

/* NOTES: XXH_INLINE_ALL compiles xxHash into this file, so the state may live on the stack (no
 * allocation that could fail) without depending on the shared library's private struct layout. */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* NOTES: bump the tag whenever the encoding below changes, so old disk-cache entries stop matching
 * instead of being misread. */
static const char qf_key_domain[] = "qfuse-key-v1";

/* NULL and "" must encode differently; no real length reaches this value. */
#define QF_KEY_NULL_LEN UINT64_MAX

/* Feeds v as 8 little-endian bytes, so the key is the same on every host. */
static void qf_key_put_u64(XXH3_state_t *st, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    XXH3_128bits_update(st, b, sizeof b);
}

static void qf_key_put_int(XXH3_state_t *st, int v) {
    qf_key_put_u64(st, (uint64_t)(int64_t)v);
}

/* NOTES: the length prefix is what makes the encoding injective: without it "ab"+"c" and
 * "a"+"bc" would feed the same bytes. */
static void qf_key_put_str(XXH3_state_t *st, const char *s) {
    if (!s) {
        qf_key_put_u64(st, QF_KEY_NULL_LEN);
        return;
    }
    size_t n = strlen(s);
    qf_key_put_u64(st, (uint64_t)n);
    XXH3_128bits_update(st, s, n);
}

/* prefix + s as one string (prefix NULL: s alone), without joining them in memory. */
static void qf_key_put_joined(XXH3_state_t *st, const char *prefix, const char *s) {
    if (!prefix || !s) {
        qf_key_put_str(st, s);
        return;
    }
    size_t np = strlen(prefix), n = strlen(s);
    qf_key_put_u64(st, (uint64_t)(np + n));
    XXH3_128bits_update(st, prefix, np);
    XXH3_128bits_update(st, s, n);
}

/* A counted list of strings; the count is part of the encoding too. */
static void qf_key_put_strs(XXH3_state_t *st, const char *const *v, int n) {
    qf_key_put_int(st, n);
    for (int i = 0; i < n; i++)
        qf_key_put_str(st, v ? v[i] : NULL);
}

/* Writes the canonical big-endian hex of h (as XXH128_canonicalFromHash orders it). */
static void qf_key_hex(XXH128_hash_t h, char hex[QF_KEY_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (size_t i = 0; i < sizeof c.digest; i++) {
        hex[2 * i] = digits[c.digest[i] >> 4];
        hex[2 * i + 1] = digits[c.digest[i] & 15];
    }
    hex[QF_KEY_HEX_LEN] = '\0';
}

void qf_key_compute(const qf_key_input *in, char hex[QF_KEY_HEX_LEN + 1]) {
    QF_ASSERT(in && hex && in->n_headers >= 0 && in->n_options >= 0);
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    qf_key_put_str(&st, qf_key_domain);
    qf_key_put_str(&st, in->name);
    qf_key_put_str(&st, in->recipe_options);
    qf_key_put_str(&st, in->variant);
    qf_key_put_joined(&st, in->source_prelude, in->source);
    /* Headers as (name, text) pairs so a text cannot move from one name to another unnoticed. */
    qf_key_put_int(&st, in->n_headers);
    for (int i = 0; i < in->n_headers; i++) {
        qf_key_put_str(&st, in->header_names ? in->header_names[i] : NULL);
        qf_key_put_str(&st, in->headers ? in->headers[i] : NULL);
    }
    qf_key_put_strs(&st, in->options, in->n_options);
    qf_key_put_int(&st, in->arch);
    qf_key_put_int(&st, in->nvrtc_major);
    qf_key_put_int(&st, in->nvrtc_minor);
    qf_key_hex(XXH3_128bits_digest(&st), hex);
}
