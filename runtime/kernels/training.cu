// Training kernels: dropout with the CPU backend's ChaCha8 masks, and the optimizers.
// Optimizer arithmetic is in double and rounded once, like the CPU backend.

// ---- ChaCha8, as rand_chacha's ChaCha8Rng (64-bit block counter, stream 0) ----

struct ChaChaKey {
    u32 words[8];
};

__device__ __forceinline__ u32 rotl(u32 x, int n) { return (x << n) | (x >> (32 - n)); }

#define QUARTER(a, b, c, d)                 \
    a += b; d ^= a; d = rotl(d, 16);        \
    c += d; b ^= c; b = rotl(b, 12);        \
    a += b; d ^= a; d = rotl(d, 8);         \
    c += d; b ^= c; b = rotl(b, 7);

// The 16 output words of block `counter`.
__device__ void chacha8_block(const ChaChaKey& key, u64 counter, u32 out[16]) {
    u32 s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u,
                 key.words[0], key.words[1], key.words[2], key.words[3],
                 key.words[4], key.words[5], key.words[6], key.words[7],
                 (u32)counter, (u32)(counter >> 32), 0u, 0u};
    u32 x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = s[i];
#pragma unroll
    for (int round = 0; round < 4; ++round) {
        QUARTER(x[0], x[4], x[8], x[12])
        QUARTER(x[1], x[5], x[9], x[13])
        QUARTER(x[2], x[6], x[10], x[14])
        QUARTER(x[3], x[7], x[11], x[15])
        QUARTER(x[0], x[5], x[10], x[15])
        QUARTER(x[1], x[6], x[11], x[12])
        QUARTER(x[2], x[7], x[8], x[13])
        QUARTER(x[3], x[4], x[9], x[14])
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = x[i] + s[i];
}

// DropoutTrain: element e keeps when the e-th u64 of the stream, as a double in [0, 1)
// from its top 53 bits, is >= ratio; one thread per ChaCha block (8 elements).
extern "C" __global__ void dropout_f32(i64 n, const ChaChaKey key, double ratio, double keep,
                                       const float* x, float* y, u8* mask) {
    GRID_STRIDE(b, (n + 7) / 8) {
        u32 words[16];
        chacha8_block(key, (u64)b, words);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            i64 e = b * 8 + k;
            if (e >= n) break;
            u64 r = ((u64)words[2 * k + 1] << 32) | words[2 * k];
            bool kept = (double)(r >> 11) / 9007199254740992.0 >= ratio;
            mask[e] = kept;
            y[e] = kept ? (float)((double)x[e] / keep) : 0.0f;
        }
    }
}

extern "C" __global__ void dropout_grad_f32(i64 n, double keep, const float* dy, const u8* mask, float* dx) {
    GRID_STRIDE(i, n) dx[i] = mask[i] ? (float)((double)dy[i] / keep) : 0.0f;
}

// ---- optimizers ----

extern "C" __global__ void sgd_f32(i64 n, double lr, const float* w, const float* g, float* w_out) {
    GRID_STRIDE(i, n) w_out[i] = (float)((double)w[i] - lr * (double)g[i]);
}

extern "C" __global__ void momentum_f32(i64 n, double lr, double momentum, const float* w, const float* v,
                                        const float* g, float* w_out, float* v_out) {
    GRID_STRIDE(i, n) {
        double vel = momentum * (double)v[i] + (double)g[i];
        w_out[i] = (float)((double)w[i] - lr * vel);
        v_out[i] = (float)vel;
    }
}

extern "C" __global__ void adam_step_f32(i64 n, const float* t, float* t_out) {
    GRID_STRIDE(i, n) t_out[i] = t[i] + 1.0f;
}

extern "C" __global__ void adam_f32(i64 n, double lr, double beta1, double beta2, double eps, const float* t,
                                    const float* w, const float* m, const float* v, const float* g,
                                    float* w_out, float* m_out, float* v_out) {
    double step = (double)t[0];
    double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    GRID_STRIDE(i, n) {
        double grad = g[i];
        double m1 = beta1 * (double)m[i] + (1.0 - beta1) * grad;
        double v1 = beta2 * (double)v[i] + (1.0 - beta2) * grad * grad;
        w_out[i] = (float)((double)w[i] - lr * (m1 / bc1) / (sqrt(v1 / bc2) + eps));
        m_out[i] = (float)m1;
        v_out[i] = (float)v1;
    }
}
