/* The bf16 AdamW's update on the host: veri_tui/trainer/adamw_kernel.py's update_ as one C loop.
 *
 * Built at first use by veri_tui/trainer/adamw_native.py (cc -O3 -ffp-contract=off
 * -fno-math-errno), called through ctypes on the parameters' memory, one call per thread
 * over a range of the group's elements. The same operations in the same order as update_'s
 * eager torch ops, each rounded to fp32 (no fused multiply-add), and the same integer hash:
 * the same bits as the eager way (tests/trainer/test_adamw.py checks it). GCC and clang
 * vectorise the loop; on x86-64 an AVX2 clone is picked at load time where the CPU has it.
 */
#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* lowbias32 (C. Wellons): adamw_kernel.mix_ */
static inline uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

static inline float widen(uint16_t b) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)b << 16;
    return c.f;
}

/* Stochastic rounding: add the bits below bf16's last place, keep the top 16 bits. */
static inline uint16_t round_sr(float x, uint32_t bits) {
    union { uint32_t u; float f; } c;
    c.f = x;
    return (uint16_t)((c.u + bits) >> 16);
}

static inline __attribute__((always_inline)) void update(
    uint16_t *restrict w, const uint16_t *restrict g, uint16_t *restrict m,
    uint16_t *restrict v, int64_t n, const float *h, uint32_t index, uint32_t key) {
    const float decay = h[0], b1 = h[1], b1c = h[2], b2 = h[3], b2c = h[4];
    const float inv_root2 = h[5], eps = h[6], neg_step = h[7];
    for (int64_t i = 0; i < n; i++) {
        float g32 = widen(g[i]);
        float m32 = widen(m[i]) * b1 + g32 * b1c;
        float v32 = widen(v[i]) * b2 + (g32 * g32) * b2c;
        float step = (m32 / (sqrtf(v32) * inv_root2 + eps)) * neg_step;
        float w32 = widen(w[i]) * decay + step;
        uint32_t hash = mix((index + (uint32_t)i) ^ key);
        w[i] = round_sr(w32, hash & 0xFFFFu);
        m[i] = round_sr(m32, hash >> 16);
        v[i] = round_sr(v32, mix(hash + 0x9E3779B9u) & 0xFFFFu);
    }
}

/* Elements [lo, hi) of a group of `count` regions laid end to end (region p holds
 * elements offset[p] .. offset[p + 1]): region p's first element has index start[p] in its
 * parameter, whose key this step is mix(key[p] ^ step_key). */
CLONES void veri_adamw_bf16(
    int64_t count, uint16_t *const *w, const uint16_t *const *g, uint16_t *const *m,
    uint16_t *const *v, const int64_t *offset, const uint32_t *start, const uint32_t *key,
    uint32_t step_key, const float *hyper, int64_t lo, int64_t hi) {
    int64_t p = 0;
    while (p < count && offset[p + 1] <= lo) p++;
    for (; p < count && offset[p] < hi; p++) {
        int64_t a = lo > offset[p] ? lo - offset[p] : 0;
        int64_t b = (hi < offset[p + 1] ? hi : offset[p + 1]) - offset[p];
        update(w[p] + a, g[p] + a, m[p] + a, v[p] + a, b - a, hyper,
               start[p] + (uint32_t)a, mix(key[p] ^ step_key));
    }
}
