// Normalizations: per-channel statistics and affine maps (BatchNormalization,
// BatchNormTrain, BatchNormGrad) over X [N, C, S], and row normalizations
// (LayerNormalization, InstanceNormalization, LayerNormGrad). Statistics are two-pass
// (mean, then Σ (x − mean)²) in double, like the CPU backend.

// ---- per-channel sums: grid-strided warps; warp w sums chunk (w % splits) of channel
// (w / splits) over the N·S elements of the channel, into partial[w · 2 + {0, 1}] ----

enum ChannelMode { CH_SUM = 0, CH_CENTERED_SQUARES, CH_GRAD };

extern "C" __global__ void channel_partials_f32(int mode, i64 n, i64 c, i64 s, i64 splits, i64 chunk,
                                                const float* x, const float* dy, const double* mean,
                                                const double* invstd, double* partial) {
    int lane = threadIdx.x & 31;
    i64 warps = ((i64)blockDim.x * gridDim.x) >> 5;
    i64 total = n * s;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < c * splits; w += warps) {
        i64 ch = w / splits, part = w % splits;
        i64 begin = part * chunk, end = begin + chunk < total ? begin + chunk : total;
        double a = 0.0, b = 0.0;
        for (i64 r = begin + lane; r < end; r += 32) {
            i64 at = ((r / s) * c + ch) * s + r % s;
            double v = x[at];
            if (mode == CH_SUM) a += v;
            else if (mode == CH_CENTERED_SQUARES) { double d = v - mean[ch]; a += d * d; }
            else { double g = dy[at]; a += g; b += g * (v - mean[ch]) * invstd[ch]; }
        }
        a = warp_sum(a);
        b = warp_sum(b);
        if (lane == 0) { partial[2 * w] = a; partial[2 * w + 1] = b; }
    }
}

// stats[ch] (and stats[c + ch]) = the sums of channel ch's splits, in split order.
extern "C" __global__ void channel_finish(i64 c, i64 splits, const double* partial, double* stats) {
    GRID_STRIDE(ch, c) {
        double a = 0.0, b = 0.0;
        for (i64 p = 0; p < splits; ++p) { a += partial[2 * (ch * splits + p)]; b += partial[2 * (ch * splits + p) + 1]; }
        stats[ch] = a;
        stats[c + ch] = b;
    }
}

// BatchNormTrain's statistics from the sums: `sums` holds Σx at [0, C) and Σ(x − mean)²
// at [2C, 3C); writes coef = (mean, invstd·scale, bias) for channel_affine and the
// outputs that are present (null pointers are skipped). The running variance takes the
// unbiased variance (·count/(count − 1)) when `unbiased` is not 0 and count > 1.
extern "C" __global__ void bn_train_stats_f32(i64 c, double count, double eps, double momentum, int unbiased,
                                              const double* mean, const double* squares,
                                              const float* scale, const float* bias,
                                              const float* running_mean, const float* running_var,
                                              double* coef, float* new_mean, float* new_var,
                                              float* saved_mean, float* saved_invstd) {
    GRID_STRIDE(ch, c) {
        double m = mean[ch], var = squares[ch] / count;
        double invstd = 1.0 / sqrt(var + eps);
        coef[ch] = m;
        coef[c + ch] = invstd * (double)scale[ch];
        coef[2 * c + ch] = (double)bias[ch];
        if (new_mean) new_mean[ch] = (float)((double)running_mean[ch] * momentum + m * (1.0 - momentum));
        double batch_var = unbiased && count > 1.0 ? var * count / (count - 1.0) : var;
        if (new_var) new_var[ch] = (float)((double)running_var[ch] * momentum + batch_var * (1.0 - momentum));
        if (saved_mean) saved_mean[ch] = (float)m;
        if (saved_invstd) saved_invstd[ch] = (float)invstd;
    }
}

// mean[ch] = Σx / count, in place.
extern "C" __global__ void scale_stats(i64 c, double count, double* sums) {
    GRID_STRIDE(ch, c) sums[ch] /= count;
}

// Inference BatchNormalization's coef = (mean, scale / sqrt(var + eps), bias).
extern "C" __global__ void bn_infer_coef_f32(i64 c, double eps, const float* scale, const float* bias,
                                             const float* mean, const float* var, double* coef) {
    GRID_STRIDE(ch, c) {
        coef[ch] = (double)mean[ch];
        coef[c + ch] = (double)scale[ch] / sqrt((double)var[ch] + eps);
        coef[2 * c + ch] = (double)bias[ch];
    }
}

// y = (x − coef[ch]) · coef[C + ch] + coef[2C + ch] over X [N, C, S].
extern "C" __global__ void channel_affine_f32(i64 n, i64 c, i64 s, const double* coef, const float* x, float* y) {
    GRID_STRIDE(i, n * c * s) {
        i64 ch = (i / s) % c;
        y[i] = (float)(((double)x[i] - coef[ch]) * coef[c + ch] + coef[2 * c + ch]);
    }
}

// Copies the float saved statistics of BatchNormGrad to double (mean, invstd).
extern "C" __global__ void widen_stats_f32(i64 c, const float* mean, const float* invstd, double* out) {
    GRID_STRIDE(ch, c) { out[ch] = mean[ch]; out[c + ch] = invstd[ch]; }
}

// BatchNormGrad: sums = (Σdy, Σdy·xhat) per channel; writes dscale, dbias and dX.
extern "C" __global__ void bn_grad_params_f32(i64 c, const double* sums, float* dscale, float* dbias) {
    GRID_STRIDE(ch, c) { dbias[ch] = (float)sums[ch]; dscale[ch] = (float)sums[c + ch]; }
}

// dX over X [N, C, S]; the count per channel is counts[ch] (a batch split's whole batch)
// or N·S when counts is null.
extern "C" __global__ void bn_grad_dx_f32(i64 n, i64 c, i64 s, const double* counts, const double* stats,
                                          const double* sums, const float* scale, const float* x,
                                          const float* dy, float* dx) {
    GRID_STRIDE(i, n * c * s) {
        i64 ch = (i / s) % c;
        double count = counts ? counts[ch] : (double)(n * s);
        double mean = stats[ch], invstd = stats[c + ch];
        double k = (double)scale[ch] * invstd / count;
        double xhat = ((double)x[i] - mean) * invstd;
        dx[i] = (float)(k * (count * (double)dy[i] - sums[ch] - xhat * sums[c + ch]));
    }
}

// ---- batch normalization split along the batch: per-part f64 [3, C] rows (count, then
// two per-channel rows), merged in part order like the CPU backend ----

// Row 0 of a part's rows = count; row 2 = second[ch] when second is not null.
extern "C" __global__ void bn_part_rows(i64 c, double count, const double* second, double* rows) {
    GRID_STRIDE(ch, c) {
        rows[ch] = count;
        if (second) rows[2 * c + ch] = second[ch];
    }
}

// BatchNormMerge, first pass over part `rows`: acc[ch] += n·mean, acc[C + ch] += n
// (assigned when first).
extern "C" __global__ void bn_merge_means(i64 c, int first, const double* rows, double* acc) {
    GRID_STRIDE(ch, c) {
        double n = rows[ch], weighted = n * rows[c + ch];
        acc[ch] = first ? weighted : acc[ch] + weighted;
        acc[c + ch] = first ? n : acc[c + ch] + n;
    }
}

// BatchNormMerge, second pass over part `rows` (acc[ch] is the mean): acc[2C + ch] +=
// M2 + n·(mean_part − mean)² (assigned when first).
extern "C" __global__ void bn_merge_squares(i64 c, int first, const double* rows, double* acc) {
    GRID_STRIDE(ch, c) {
        double d = rows[c + ch] - acc[ch];
        double m2 = rows[2 * c + ch] + rows[ch] * (d * d);
        acc[2 * c + ch] = first ? m2 : acc[2 * c + ch] + m2;
    }
}

// acc[ch] /= acc[C + ch]: the weighted sum of means becomes the batch's mean.
extern "C" __global__ void bn_merge_mean(i64 c, double* acc) {
    GRID_STRIDE(ch, c) acc[ch] /= acc[c + ch];
}

// BatchNormMerge's outputs from acc = (mean, count, M2): running statistics, saved
// mean and inverse std, and batch = (mean, invstd) in double; `unbiased` as in
// bn_train_stats_f32.
extern "C" __global__ void bn_merge_finish_f32(i64 c, double eps, double momentum, int unbiased, const double* acc,
                                               const float* running_mean, const float* running_var,
                                               float* new_mean, float* new_var, float* saved_mean,
                                               float* saved_invstd, double* batch) {
    GRID_STRIDE(ch, c) {
        double m = acc[ch], count = acc[c + ch], var = acc[2 * c + ch] / count;
        double invstd = 1.0 / sqrt(var + eps);
        double batch_var = unbiased && count > 1.0 ? var * count / (count - 1.0) : var;
        new_mean[ch] = (float)((double)running_mean[ch] * momentum + m * (1.0 - momentum));
        new_var[ch] = (float)((double)running_var[ch] * momentum + batch_var * (1.0 - momentum));
        saved_mean[ch] = (float)m;
        saved_invstd[ch] = (float)invstd;
        batch[ch] = m;
        batch[c + ch] = invstd;
    }
}

// BatchNormApply's coef = (mean, invstd·scale, bias) from batch = (mean, invstd).
extern "C" __global__ void bn_apply_coef_f32(i64 c, const double* batch, const float* scale, const float* bias,
                                             double* coef) {
    GRID_STRIDE(ch, c) {
        coef[ch] = batch[ch];
        coef[c + ch] = batch[c + ch] * (double)scale[ch];
        coef[2 * c + ch] = (double)bias[ch];
    }
}

// BatchNormGradMerge: total += part over `len` doubles (assigned when first).
extern "C" __global__ void bn_rows_add(i64 len, int first, const double* part, double* total) {
    GRID_STRIDE(i, len) total[i] = first ? part[i] : total[i] + part[i];
}

// ---- row normalization: one block per row of n elements. The parameter of element j
// of row r is scale[j] (LayerNormalization) or scale[r % channels] (InstanceNormalization,
// channels > 0). bias may be null (zeros); mean_out and invstd_out may be null ----

extern "C" __global__ void row_norm_f32(i64 rows, i64 n, i64 channels, double eps, const float* x,
                                        const float* scale, const float* bias, float* y, float* mean_out,
                                        float* invstd_out) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = x + r * n;
        double sum = 0.0;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) sum += (double)row[j];
        double mean = block_sum(sum) / (double)(n > 0 ? n : 1);
        double sq = 0.0;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) { double d = (double)row[j] - mean; sq += d * d; }
        double var = block_sum(sq) / (double)(n > 0 ? n : 1);
        double inv = 1.0 / sqrt(var + eps);
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            i64 p = channels > 0 ? r % channels : j;
            double b = bias ? (double)bias[p] : 0.0;
            y[r * n + j] = (float)(((double)row[j] - mean) * inv * (double)scale[p] + b);
        }
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[r] = (float)mean;
            if (invstd_out) invstd_out[r] = (float)inv;
        }
    }
}

// LayerNormGrad's dX, one block per row.
extern "C" __global__ void layer_norm_dx_f32(i64 rows, i64 n, const float* dy, const float* x, const float* scale,
                                             const float* mean, const float* invstd, float* dx) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        double m = mean[r], inv = invstd[r];
        double sum_g = 0.0, sum_gx = 0.0;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            double g = (double)dy[r * n + j] * (double)scale[j];
            sum_g += g;
            sum_gx += g * ((double)x[r * n + j] - m) * inv;
        }
        double mean_g = block_sum(sum_g) / (double)n, mean_gx = block_sum(sum_gx) / (double)n;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            double g = (double)dy[r * n + j] * (double)scale[j];
            double xhat = ((double)x[r * n + j] - m) * inv;
            dx[r * n + j] = (float)(inv * (g - mean_g - xhat * mean_gx));
        }
    }
}

// LayerNormGrad's dscale, dbias: column sums over rows, split into chunks of rows;
// thread (column j, split p) writes partial[(p · n + j) · 2 + {0, 1}].
extern "C" __global__ void layer_norm_partials_f32(i64 rows, i64 n, i64 splits, i64 chunk, const float* dy,
                                                   const float* x, const float* mean, const float* invstd,
                                                   double* partial) {
    GRID_STRIDE(t, n * splits) {
        i64 j = t % n, p = t / n;
        i64 begin = p * chunk, end = begin + chunk < rows ? begin + chunk : rows;
        double ds = 0.0, db = 0.0;
        for (i64 r = begin; r < end; ++r) {
            double d = dy[r * n + j];
            ds += d * ((double)x[r * n + j] - (double)mean[r]) * (double)invstd[r];
            db += d;
        }
        partial[2 * t] = ds;
        partial[2 * t + 1] = db;
    }
}

extern "C" __global__ void layer_norm_finish_f32(i64 n, i64 splits, const double* partial, float* dscale,
                                                 float* dbias) {
    GRID_STRIDE(j, n) {
        double ds = 0.0, db = 0.0;
        for (i64 p = 0; p < splits; ++p) { ds += partial[2 * (p * n + j)]; db += partial[2 * (p * n + j) + 1]; }
        dscale[j] = (float)ds;
        dbias[j] = (float)db;
    }
}

// LRN across channels of X [N, C, sp]: the denominator bias + alpha/size · Σ x² over the
// channels [ch − before, ch + after] at element (ni, ch, s), summed in channel order.
__device__ double lrn_denominator(i64 c, i64 sp, i64 before, i64 after, double alpha_over_size, double bias,
                                  const float* x, i64 ni, i64 ch, i64 s) {
    i64 lo = ch - before < 0 ? 0 : ch - before, hi = ch + after > c - 1 ? c - 1 : ch + after;
    double sq = 0.0;
    for (i64 k = lo; k <= hi; ++k) {
        double v = x[(ni * c + k) * sp + s];
        sq += v * v;
    }
    return bias + alpha_over_size * sq;
}

// Y = X / denominator^beta.
extern "C" __global__ void lrn_f32(i64 n, i64 c, i64 sp, i64 before, i64 after, double alpha_over_size, double beta,
                                   double bias, const float* x, float* y) {
    GRID_STRIDE(e, n * c * sp) {
        i64 s = e % sp, ch = e / sp % c, ni = e / (sp * c);
        double d = lrn_denominator(c, sp, before, after, alpha_over_size, bias, x, ni, ch, s);
        y[e] = (float)((double)x[e] / pow(d, beta));
    }
}

// dX of LRN, per element (a gather over the channels whose sums include it, no atomics):
// dX_j = dY_j · d_j^−β − 2αβ/size · X_j · Σ_{ch: j in ch's window} dY_ch · X_ch · d_ch^(−β−1).
extern "C" __global__ void lrn_grad_f32(i64 n, i64 c, i64 sp, i64 before, i64 after, double alpha_over_size,
                                        double beta, double bias, const float* dy, const float* x, float* dx) {
    GRID_STRIDE(e, n * c * sp) {
        i64 s = e % sp, j = e / sp % c, ni = e / (sp * c);
        i64 lo = j - after < 0 ? 0 : j - after, hi = j + before > c - 1 ? c - 1 : j + before;
        double cross = 0.0;
        for (i64 ch = lo; ch <= hi; ++ch) {
            i64 at = (ni * c + ch) * sp + s;
            double d = lrn_denominator(c, sp, before, after, alpha_over_size, bias, x, ni, ch, s);
            cross += (double)dy[at] * (double)x[at] * pow(d, -beta - 1.0);
        }
        double dj = lrn_denominator(c, sp, before, after, alpha_over_size, bias, x, ni, j, s);
        dx[e] = (float)((double)dy[e] * pow(dj, -beta) - 2.0 * alpha_over_size * beta * (double)x[e] * cross);
    }
}
