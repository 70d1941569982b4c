//! The backend's kernels on the emulated device: multi-block launches with grid tails
//! (more work than threads, and more blocks than work) for every kernel family, against
//! references that follow the CPU backend's arithmetic (bit for bit where the kernel's
//! order of operations is the reference's), and planted faults that must be reported.

use lms_cuda_emulator::{self as emu, Arg, DevicePtr, EmuError, LaunchConfig};

/// A small deterministic generator of test values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn floats(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * self.next() as f32).collect()
    }
}

fn bytes_of<T: Copy>(values: &[T]) -> Vec<u8> {
    // SAFETY: plain numbers, read as bytes.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }.to_vec()
}

/// Device memory holding `values`.
fn upload<T: Copy>(values: &[T]) -> DevicePtr {
    let bytes = bytes_of(values);
    let ptr = emu::alloc(bytes.len() as u64).unwrap();
    emu::copy_to_device(ptr, &bytes).unwrap();
    ptr
}

/// `n` values of type `T` read back from `ptr`.
fn download<T: Copy + Default>(ptr: DevicePtr, n: usize) -> Vec<T> {
    let mut values = vec![T::default(); n];
    let size = std::mem::size_of_val(values.as_slice());
    // SAFETY: `values` holds `size` bytes of plain numbers.
    let bytes = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), size) };
    emu::copy_from_device(bytes, ptr).unwrap();
    values
}

/// The grids every case runs with, for `threads` per block: fewer threads than work
/// (grid-stride loops with a tail), and more blocks than work, each in two block orders.
fn configs(threads: u32) -> Vec<LaunchConfig> {
    let mut all = Vec::new();
    for grid in [3, 40] {
        for seed in [1, 2] {
            all.push(LaunchConfig { seed, ..LaunchConfig::linear(grid, threads) });
        }
    }
    all
}

fn assert_bits(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} != {w}");
    }
}

fn assert_close(name: &str, got: &[f32], want: &[f64], tolerance: f64) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tolerance * (1.0 + w.abs()), "{name}[{i}]: {g} vs {w}");
    }
}

/// `Layout` of common.cuh: rank, count, dims, strides per operand, offsets.
fn layout(dims: &[i64], strides: &[&[i64]]) -> Arg {
    let mut words = vec![0i64; 2 + 8 + 4 * 8 + 4];
    words[0] = dims.len() as i64;
    words[1] = dims.iter().product();
    words[2..2 + dims.len()].copy_from_slice(dims);
    for (k, s) in strides.iter().enumerate() {
        words[10 + 8 * k..10 + 8 * k + s.len()].copy_from_slice(s);
    }
    Arg::Bytes(bytes_of(&words))
}

#[test]
fn the_six_kernel_sources_are_all_compiled() {
    let kernels = emu::kernels();
    let mut sources: Vec<&str> = kernels.iter().map(|k| k.source.as_str()).collect();
    sources.dedup();
    assert_eq!(
        sources,
        ["elementwise.cu", "indexing.cu", "norm.cu", "pool.cu", "reduce.cu", "training.cu", "faults.cu"]
    );
    let backend = kernels.iter().filter(|k| k.source != "faults.cu").count();
    assert!(backend >= 78, "only {backend} kernels");
    assert!(matches!(emu::kernel_index("no_such_kernel"), Err(EmuError::NoSuchKernel(_))));
}

#[test]
fn unary_kernels_match_the_host_bit_for_bit_with_grid_tails() {
    let n = 1000;
    let x = Rng(7).floats(n, -4.0, 4.0);
    let dx = upload(&x);
    let dy = emu::alloc(4 * n as u64).unwrap();
    let sigmoid = |v: f32| if v >= 0.0 { 1.0 / (1.0 + (-v).exp()) } else { v.exp() / (1.0 + v.exp()) };
    type Case = (i32, &'static str, fn(f32) -> f32);
    let cases: [Case; 4] =
        [(0, "relu", |v| v.max(0.0)), (13, "exp", f32::exp), (5, "tanh", f32::tanh), (2, "abs", f32::abs)];
    for config in configs(128) {
        for (op, name, f) in cases {
            let args = [Arg::I32(op), Arg::I64(n as i64), dx.into(), dy.into(), Arg::F32(0.0), Arg::F32(0.0)];
            emu::launch("unary_f32", config, &args).unwrap();
            let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
            assert_bits(name, &download(dy, n), &want);
        }
        let args = [Arg::I32(4), Arg::I64(n as i64), dx.into(), dy.into(), Arg::F32(0.0), Arg::F32(0.0)];
        emu::launch("unary_f32", config, &args).unwrap();
        assert_bits("sigmoid", &download(dy, n), &x.iter().map(|&v| sigmoid(v)).collect::<Vec<_>>());
    }
}

#[test]
fn broadcast_binary_through_a_layout_matches_the_host() {
    // y[i, j] = a[i, j] * b[j] over [33, 45].
    let (rows, cols) = (33usize, 45usize);
    let mut rng = Rng(11);
    let a = rng.floats(rows * cols, -2.0, 2.0);
    let b = rng.floats(cols, -2.0, 2.0);
    let (da, db) = (upload(&a), upload(&b));
    let dy = emu::alloc(4 * (rows * cols) as u64).unwrap();
    let l = layout(&[rows as i64, cols as i64], &[&[cols as i64, 1], &[cols as i64, 1], &[0, 1]]);
    for config in configs(64) {
        emu::launch("binary_f32", config, &[Arg::I32(2), l.clone(), dy.into(), da.into(), db.into()]).unwrap();
        let want: Vec<f32> = (0..rows * cols).map(|i| a[i] * b[i % cols]).collect();
        assert_bits("mul", &download(dy, rows * cols), &want);
    }
}

#[test]
fn warp_reductions_match_the_same_tree_on_the_host_bit_for_bit() {
    // Row sums of [37, 300], one warp per row: lanes stride by 32, then the xor butterfly.
    let (rows, n) = (37usize, 300usize);
    let x = Rng(3).floats(rows * n, -1.0, 1.0);
    let dx = upload(&x);
    let dy = emu::alloc(4 * rows as u64).unwrap();
    let mut words = vec![0i64; 4 + 4 * 8];
    words[..4].copy_from_slice(&[1, 1, rows as i64, n as i64]);
    words[4] = rows as i64; // out_dims
    words[12] = n as i64; // out_strides
    words[20] = n as i64; // red_dims
    words[28] = 1; // red_strides
    let params = Arg::Bytes(bytes_of(&words));
    let want: Vec<f32> = (0..rows)
        .map(|r| {
            let mut lanes: Vec<f64> =
                (0..32).map(|l| (l..n).step_by(32).fold(0.0, |acc, i| acc + x[r * n + i] as f64)).collect();
            for o in [16, 8, 4, 2, 1] {
                lanes = (0..32).map(|l| lanes[l] + lanes[l ^ o]).collect();
            }
            lanes[0] as f32
        })
        .collect();
    for config in configs(128) {
        emu::launch("reduce_f32", config, &[Arg::I32(0), params.clone(), dx.into(), dy.into(), Arg::F64(1.0)]).unwrap();
        assert_bits("row sums", &download(dy, rows), &want);
    }
}

#[test]
fn block_reductions_softmax_matches_and_does_not_depend_on_the_order() {
    let (rows, n) = (5usize, 1000usize);
    let x = Rng(5).floats(rows * n, -3.0, 3.0);
    let dx = upload(&x);
    let dy = emu::alloc(4 * (rows * n) as u64).unwrap();
    let mut want = Vec::new();
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        want.extend(row.iter().map(|&v| (v as f64 - max).exp() / sum));
    }
    let mut first: Option<Vec<f32>> = None;
    for config in configs(256) {
        let args = [Arg::I64(rows as i64), Arg::I64(n as i64), Arg::I64(1), Arg::I32(0), dx.into(), dy.into()];
        emu::launch("softmax_f32", config, &args).unwrap();
        let got = download::<f32>(dy, rows * n);
        assert_close("softmax", &got, &want, 1e-6);
        // A fixed tree: the same bits whatever the block and thread orders.
        assert_bits("softmax again", &got, first.get_or_insert_with(|| got.clone()));
    }
}

#[test]
fn gather_and_the_optimizer_match_the_host() {
    // Gather along the middle axis of [3, 10, 7] with negative and out-of-range indices.
    let (outer, dim, inner) = (3usize, 10usize, 7usize);
    let x: Vec<u32> = (0..(outer * dim * inner) as u32).collect();
    let idx: Vec<i64> = vec![0, 9, -1, -10, 10, -11, 4];
    let (dx, didx) = (upload(&x), upload(&idx));
    let count = idx.len();
    let dy = emu::alloc(4 * (outer * count * inner) as u64).unwrap();
    let mut want = Vec::new();
    for o in 0..outer {
        for &r in &idx {
            let r = if r < 0 { r + dim as i64 } else { r };
            for i in 0..inner {
                want.push(if (0..dim as i64).contains(&r) { x[(o * dim + r as usize) * inner + i] } else { 0 });
            }
        }
    }
    for config in configs(32) {
        let args = [
            Arg::I64(outer as i64),
            Arg::I64(dim as i64),
            Arg::I64(inner as i64),
            Arg::I64(count as i64),
            didx.into(),
            Arg::I32(1),
            dx.into(),
            dy.into(),
        ];
        emu::launch("gather_4", config, &args).unwrap();
        assert_eq!(download::<u32>(dy, want.len()), want);
    }

    let n = 999;
    let mut rng = Rng(9);
    let (w, g) = (rng.floats(n, -1.0, 1.0), rng.floats(n, -1.0, 1.0));
    let (dw, dg) = (upload(&w), upload(&g));
    let dout = emu::alloc(4 * n as u64).unwrap();
    for config in configs(256) {
        emu::launch("sgd_f32", config, &[Arg::I64(n as i64), Arg::F64(0.1), dw.into(), dg.into(), dout.into()])
            .unwrap();
        let want: Vec<f32> = (0..n).map(|i| (w[i] as f64 - 0.1 * g[i] as f64) as f32).collect();
        assert_bits("sgd", &download(dout, n), &want);
    }
}

#[test]
fn normalizations_match_the_host() {
    // LayerNorm over rows of [7, 300] with per-column scale and bias, one block per row.
    let (rows, n) = (7usize, 300usize);
    let mut rng = Rng(21);
    let (x, scale, bias) = (rng.floats(rows * n, -2.0, 2.0), rng.floats(n, 0.5, 1.5), rng.floats(n, -1.0, 1.0));
    let (dx, dscale, dbias) = (upload(&x), upload(&scale), upload(&bias));
    let dy = emu::alloc(4 * (rows * n) as u64).unwrap();
    let mut want = Vec::new();
    for r in 0..rows {
        let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        want.extend(row.iter().enumerate().map(|(j, v)| (v - mean) * inv * scale[j] as f64 + bias[j] as f64));
    }
    for config in configs(128) {
        let args = [
            Arg::I64(rows as i64),
            Arg::I64(n as i64),
            Arg::I64(0),
            Arg::F64(1e-5),
            dx.into(),
            dscale.into(),
            dbias.into(),
            dy.into(),
            Arg::Ptr(0),
            Arg::Ptr(0),
        ];
        emu::launch("row_norm_f32", config, &args).unwrap();
        assert_close("layer norm", &download(dy, rows * n), &want, 1e-5);
    }

    // BatchNorm's per-channel affine map over [2, 3, 50], bit for bit.
    let (batch, c, s) = (2usize, 3usize, 50usize);
    let coef: Vec<f64> = vec![0.1, -0.2, 0.3, 2.0, 0.5, 1.5, -1.0, 0.0, 1.0];
    let x = Rng(23).floats(batch * c * s, -1.0, 1.0);
    let (dcoef, dx) = (upload(&coef), upload(&x));
    let dy = emu::alloc(4 * x.len() as u64).unwrap();
    let want: Vec<f32> = (0..x.len())
        .map(|i| {
            let ch = (i / s) % c;
            ((x[i] as f64 - coef[ch]) * coef[c + ch] + coef[2 * c + ch]) as f32
        })
        .collect();
    for config in configs(64) {
        let args = [Arg::I64(batch as i64), Arg::I64(c as i64), Arg::I64(s as i64), dcoef.into(), dx.into(), dy.into()];
        emu::launch("channel_affine_f32", config, &args).unwrap();
        assert_bits("channel affine", &download(dy, x.len()), &want);
    }
}

#[test]
fn average_pooling_matches_the_host() {
    // 3x3 windows, stride 2, one padded row and column each side, padding not counted.
    let (planes, h, w) = (4usize, 9usize, 11usize);
    let (oh, ow) = ((h + 2 - 3) / 2 + 1, (w + 2 - 3) / 2 + 1);
    let x = Rng(31).floats(planes * h * w, -1.0, 1.0);
    let dx = upload(&x);
    let dy = emu::alloc(4 * (planes * oh * ow) as u64).unwrap();
    let window: Vec<i64> =
        [[1, h as i64, w as i64], [1, 3, 3], [1, oh as i64, ow as i64], [1, 2, 2], [1, 1, 1], [0, 1, 1], [0, 1, 1]]
            .concat();
    let mut want = Vec::new();
    for p in 0..planes {
        for oy in 0..oh as i64 {
            for ox in 0..ow as i64 {
                let (mut sum, mut count) = (0.0f64, 0);
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (y, xx) = (oy * 2 + ky - 1, ox * 2 + kx - 1);
                        if (0..h as i64).contains(&y) && (0..w as i64).contains(&xx) {
                            sum += x[p * h * w + y as usize * w + xx as usize] as f64;
                            count += 1;
                        }
                    }
                }
                want.push((sum / count as f64) as f32);
            }
        }
    }
    for config in configs(32) {
        let args = [Arg::I64(planes as i64), Arg::Bytes(bytes_of(&window)), Arg::I32(0), dx.into(), dy.into()];
        emu::launch("avg_pool_f32", config, &args).unwrap();
        assert_bits("average pool", &download(dy, want.len()), &want);
    }
}

fn row_sums(kernel: &str, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let (rows, n) = (6usize, 500usize);
    let x = Rng(13).floats(rows * n, -1.0, 1.0);
    let (dx, dy) = (upload(&x), emu::alloc(4 * rows as u64).unwrap());
    let config = LaunchConfig { seed, ..LaunchConfig::linear(4, 256) };
    emu::launch(kernel, config, &[Arg::I64(rows as i64), Arg::I64(n as i64), dx.into(), dy.into()]).unwrap();
    let want = (0..rows).map(|r| x[r * n..(r + 1) * n].iter().map(|&v| v as f64).sum::<f64>() as f32).collect();
    (download(dy, rows), want)
}

#[test]
fn a_missing_syncthreads_gives_wrong_sums_where_the_barrier_gives_right_ones() {
    for seed in 0..4 {
        let (got, want) = row_sums("fault_row_sum", seed);
        let wanted: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        assert_close("with the barrier", &got, &wanted, 1e-5);
        let (got, _) = row_sums("fault_row_sum_unsynchronised", seed);
        let wrong = got.iter().zip(&want).filter(|(g, w)| ((**g - **w) as f64).abs() > 1e-3).count();
        assert!(wrong > 0, "seed {seed}: the missing barrier went unnoticed: {got:?}");
    }
}

fn fault(name: &str, config: LaunchConfig, args: &[Arg]) -> String {
    match emu::launch(name, config, args) {
        Err(EmuError::Fault(why)) | Err(EmuError::BadLaunch(why)) => why,
        other => panic!("{name}: expected a fault, got {other:?}"),
    }
}

#[test]
fn divergent_barriers_exited_lanes_and_invalid_accesses_are_reported() {
    let x = upload(&[1.0f32; 128]);
    let y = emu::alloc(4 * 64).unwrap();

    // A whole warp past the end exits (a partial one would fail at the shuffle first).
    let why = fault("fault_early_exit", LaunchConfig::linear(2, 64), &[Arg::I64(96), x.into(), y.into()]);
    assert!(why.contains("barrier divergence") && why.contains("has exited") && why.contains("common.cuh"), "{why}");

    let why = fault("fault_divergent_barrier", LaunchConfig::linear(1, 64), &[y.into()]);
    assert!(why.contains("barrier divergence") && why.contains("faults.cu"), "{why}");

    let why = fault("fault_half_warp_exit", LaunchConfig::linear(1, 64), &[x.into(), y.into()]);
    assert!(why.contains("reads lane") && why.contains("has exited"), "{why}");

    let why = fault("fault_off_by_one", LaunchConfig::linear(3, 32), &[Arg::I64(64), y.into()]);
    assert!(why.contains("invalid memory access") && why.contains("byte 256 of an allocation of 256 bytes"), "{why}");

    let host = vec![0f32; 64];
    let why = fault("fault_off_by_one", LaunchConfig::linear(1, 32), &[Arg::I64(64), Arg::Ptr(host.as_ptr() as u64)]);
    assert!(why.contains("argument 1") && why.contains("not device memory"), "{why}");

    emu::free(y).unwrap();
    let why =
        fault("sgd_f32", LaunchConfig::linear(1, 32), &[Arg::I64(4), Arg::F64(0.1), x.into(), x.into(), y.into()]);
    assert!(why.contains("freed allocation"), "{why}");
    assert!(matches!(emu::copy_to_device(y, &[0; 4]), Err(EmuError::InvalidAddress(_))));

    // The device keeps working after faults.
    let (got, want) = row_sums("fault_row_sum", 0);
    assert_close("after faults", &got, &want.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1e-5);
}

#[test]
fn launch_configurations_outside_the_limits_are_refused() {
    let y = emu::alloc(4).unwrap();
    for config in [LaunchConfig::linear(1, 1025), LaunchConfig::linear(0, 32)] {
        assert!(matches!(emu::launch("fault_divergent_barrier", config, &[y.into()]), Err(EmuError::BadLaunch(_))));
    }
}
