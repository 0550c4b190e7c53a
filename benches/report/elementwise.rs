//! The elementwise section: the cases fused and unfused, next to the adapter's copies and raw kernels.

use crate::check::{check_correctness, realize_counts, with_fusion, wrong};
use crate::common::{Case, IDEAL_BYTES_PER_ELEMENT};
use crate::raw::{Raw, RawOp};
use crate::timing::{abc, env_num, gbs, measure, measure_parts, ms, size_name, Config, Pair, Timing};
use lazor::Device;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Row {
    resident: [Option<Timing>; 2],
    readback: [Option<Timing>; 2],
}

struct SizeResult {
    n: usize,
    rows: Vec<(Case, Row)>,
    /// lazor chain3 fused: `batch` realizes (each output dropped at once), then one synchronize; per realize.
    chain3_pipelined: Timing,
    /// lazor chain3 fused: CPU time of building the expression and `realize()` returning (the wait not counted).
    chain3_cpu: Timing,
    copy: Pair,
    copy_kernel: Pair,
    chain3_scalar: Pair,
    chain3_vec4: Pair,
    /// Read-back of 4 bytes x n with a reused staging buffer: copy + wait, map + wait, copy out.
    read_reused: [Timing; 3],
    /// The same with a new staging buffer each time (what lazor does above 64 MiB): creating it, then as above.
    read_fresh: [Timing; 4],
}

impl SizeResult {
    fn chain3_fused(&self) -> Timing {
        self.rows[0].1.resident[0].expect("chain3 fused")
    }
}

/// Submits and dispatches of one chain3 realize, fused and unfused: `(submits, dispatches)` each.
fn chain3_counts(dev: &Device) -> [(u64, u64); 2] {
    let [a, b, c] = abc(dev, 1 << 10);
    [true, false].map(|fuse| with_fusion(dev, fuse, || realize_counts(dev, || Case::Chain3.build(&a, &b, &c))))
}

/// One size's cells on `dev`, the one device the whole section uses, as a user's program has: sizes one after
/// another share its pool (which evicts the least recently freed past its budget).
fn run_size(dev: &Device, raw: &Raw, cfg: &Config, n: usize) -> SizeResult {
    let dev = dev.clone();
    let batch = cfg.batch;
    let [a, b, c] = abc(&dev, n);
    dev.synchronize().expect("synchronize");

    // All device-resident cells first: the read-back cells at large sizes keep the GPU idle for seconds, and the
    // cells measured right after them came out slower on the H200 (see docs/BENCHMARKS.md).
    let mut rows: Vec<(Case, Row)> = Case::ALL.iter().map(|&c| (c, Row::default())).collect();
    for readback in [false, true] {
        for (case, row) in rows.iter_mut() {
            let case = *case;
            for (k, fuse) in [true, false].into_iter().enumerate() {
                dev.set_fusion(fuse);
                let t = if readback {
                    measure(cfg, || {
                        black_box(case.build(&a, &b, &c).to_vec());
                    })
                } else {
                    measure(cfg, || {
                        let y = case.build(&a, &b, &c);
                        y.realize().expect("realize");
                        dev.synchronize().expect("synchronize");
                    })
                };
                if readback {
                    row.readback[k] = Some(t);
                } else {
                    row.resident[k] = Some(t);
                }
                dev.set_fusion(true);
            }
        }
        eprintln!("  {} {}: done", size_name(n), if readback { "read-back" } else { "device-resident" });
    }
    let [chain3_cpu] = measure_parts(cfg, || {
        let t = Instant::now();
        let y = Case::Chain3.build(&a, &b, &c);
        y.realize().expect("realize");
        let spent = t.elapsed();
        dev.synchronize().expect("synchronize");
        [spent]
    });
    let chain3_pipelined = measure(cfg, || {
        for _ in 0..batch {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            Case::Chain3.build(&a, &b, &c).realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
    })
    .per(batch);
    drop((a, b, c, dev));

    let bytes = n as u64 * 4;
    let (src, dst) = (raw.buffer(bytes, "copy src"), raw.buffer(bytes, "copy dst"));
    let copy = Pair {
        one: measure(cfg, || raw.copy(&src, &dst, 1)),
        many: measure(cfg, || raw.copy(&src, &dst, batch)).per(batch),
    };
    drop(dst);
    let staging = raw.staging(bytes);
    let read_reused = measure_parts(cfg, || raw.read(&src, &staging).1);
    drop(staging);
    let read_fresh = measure_parts(cfg, || {
        let t = Instant::now();
        let staging = raw.staging(bytes);
        let created = t.elapsed();
        let [a, b, c] = raw.read(&src, &staging).1;
        [created, a, b, c]
    });
    drop(src);
    let copy_kernel = raw.time(cfg, RawOp::CopyVec4, n);
    let chain3_scalar = raw.time(cfg, RawOp::Chain3Scalar, n);
    let chain3_vec4 = raw.time(cfg, RawOp::Chain3Vec4, n);
    raw.wait();
    eprintln!("  {}: raw wgpu done", size_name(n));
    SizeResult {
        n,
        rows,
        chain3_pipelined,
        chain3_cpu,
        copy,
        copy_kernel,
        chain3_scalar,
        chain3_vec4,
        read_reused,
        read_fresh,
    }
}

fn print_lazor_table(results: &[SizeResult], title: &str, pick: impl Fn(&Row) -> [Option<Timing>; 2]) {
    println!("\n### {title}\n");
    println!("| case | elements | fused ms | fused GB/s | unfused ms | unfused GB/s | fused speedup | runs (f/u) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for case in Case::ALL {
        for r in results {
            let row = &r.rows.iter().find(|(c, _)| *c == case).expect("case").1;
            let [Some(f), Some(u)] = pick(row) else {
                continue;
            };
            let bytes = r.n as u64 * IDEAL_BYTES_PER_ELEMENT;
            println!(
                "| {} | {} | {} | {:.1} | {} | {:.1} | {:.2}x | {}/{} |",
                case.name(),
                size_name(r.n),
                ms(f.median),
                gbs(bytes, f.median),
                ms(u.median),
                gbs(bytes, u.median),
                u.median.as_secs_f64() / f.median.as_secs_f64(),
                f.runs,
                u.runs
            );
        }
    }
}

/// The elementwise section: fused and unfused cases, copies, raw kernels, read-back. False on a failure.
pub fn run() -> bool {
    let dev = match Device::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench: no GPU adapter could be opened: {e}");
            return false;
        }
    };
    let raw = Raw::open(&dev);
    let cpu = raw.info.device_type == wgpu::DeviceType::Cpu;
    let big = std::env::var("LAZOR_BENCH_BIG").is_ok_and(|v| v.trim() == "1");
    let max_log2 = env_num("LAZOR_BENCH_MAX_LOG2").unwrap_or(64);
    let mut sizes: Vec<usize> = vec![1 << 10, 1 << 16, 1 << 20, 1 << 24];
    if dev.max_tensor_bytes() >= 4 << 26 {
        sizes.push(1 << 26);
    }
    let keep = |n: usize| !(cpu && !big && n >= 1 << 24) && n.trailing_zeros() as u64 <= max_log2;
    let skipped: Vec<String> = sizes.iter().filter(|&&n| !keep(n)).map(|&n| size_name(n)).collect();
    sizes.retain(|&n| keep(n));
    let cfg = Config::from_env(sizes, if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("## lazor elementwise benchmark\n");
    println!(
        "- adapter: {} ({}, {:?}); raw wgpu baselines on: {} ({:?})",
        dev.adapter_name(),
        dev.backend(),
        raw.info.device_type,
        raw.info.name,
        raw.info.backend
    );
    println!("- driver: {} {}; max tensor bytes: {}", raw.info.driver, raw.info.driver_info, dev.max_tensor_bytes());
    println!("- {}; GB/s = 10^9 bytes/s; batched columns: {batch} per wait", cfg.method());
    if !skipped.is_empty() {
        println!(
            "- skipped sizes: {} (CPU adapter without LAZOR_BENCH_BIG=1, or LAZOR_BENCH_MAX_LOG2)",
            skipped.join(", ")
        );
    }

    if let Err(e) = check_correctness(&dev).and_then(|()| raw.check()) {
        return wrong(e);
    }
    println!(
        "- correctness: all cases, fused and unfused, match the host within 1e-4 (relative) at 2^16; the raw \
         kernels match at 2^12"
    );
    let [(fs, fd), (us, ud)] = chain3_counts(&dev);
    let ok = fs == 1 && fd == 1 && us == 1;
    println!(
        "- dispatch/submit counts for one chain3 realize: fused {fs} submit, {fd} dispatch; unfused {us} submit, \
         {ud} dispatches{}",
        if ok { " (as expected)" } else { " (UNEXPECTED: fused should be 1 submit, 1 dispatch)" }
    );
    let mut results = Vec::new();
    for &n in &cfg.sizes {
        eprintln!("size {}", size_name(n));
        results.push(run_size(&dev, &raw, &cfg, n));
    }

    print_lazor_table(&results, "Device-resident: build, realize(), synchronize()", |r| r.resident);
    print_lazor_table(&results, "With read-back: build, to_vec()", |r| r.readback);

    println!("\n### chain3 fused vs the device's own copy\n");
    println!(
        "chain3: lazor, fused, device-resident (16 bytes/element). copy: `copy_buffer_to_buffer` (vkCmdCopyBuffer \
         on Vulkan) of 4 bytes x elements; kernel copy: a raw WGSL compute kernel, vec4 per thread. Both count \
         read + write (8 bytes/element). `1/submit` = one per submit, then wait (the method of lazor's rows); \
         `x{batch}` = {batch} in one submit, time per copy.\n"
    );
    println!(
        "| elements | chain3 fused GB/s | copy GB/s | copy x{batch} GB/s | kernel copy GB/s | kernel copy x{batch} \
         GB/s | chain3 / copy | chain3 / copy x{batch} | chain3 / kernel copy | chain3 / kernel copy x{batch} |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let cb = r.n as u64 * 8;
        let ch = gbs(r.n as u64 * IDEAL_BYTES_PER_ELEMENT, r.chain3_fused().median);
        let c = [r.copy.one, r.copy.many, r.copy_kernel.one, r.copy_kernel.many].map(|t| gbs(cb, t.median));
        println!(
            "| {} | {ch:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}% | {:.0}% | {:.0}% |",
            size_name(r.n),
            c[0],
            c[1],
            c[2],
            c[3],
            100.0 * ch / c[0],
            100.0 * ch / c[1],
            100.0 * ch / c[2],
            100.0 * ch / c[3]
        );
    }

    println!("\n### Where the time goes: chain3 in GB/s (16 bytes/element)\n");
    println!(
        "lazor 1/sync = the fused row above; lazor x{batch}/sync = {batch} realizes then one synchronize, per \
         realize; raw = hand-written WGSL on a raw wgpu device, `scalar` the same shape as lazor's generated kernel \
         (1 element per thread, 256 per workgroup, scalars from the parameter buffer), `vec4` 4 elements per \
         thread with 16-byte loads; `1/submit` = one dispatch per submit then wait, `x{batch}` = {batch} dispatches \
         in one pass, per dispatch.\n"
    );
    println!(
        "| elements | lazor 1/sync | lazor x{batch}/sync | raw scalar 1/submit | raw scalar x{batch} | raw vec4 \
         1/submit | raw vec4 x{batch} | lazor realize() CPU ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let b = r.n as u64 * IDEAL_BYTES_PER_ELEMENT;
        let t = [
            r.chain3_fused(),
            r.chain3_pipelined,
            r.chain3_scalar.one,
            r.chain3_scalar.many,
            r.chain3_vec4.one,
            r.chain3_vec4.many,
        ]
        .map(|t| gbs(b, t.median));
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            size_name(r.n),
            t[0],
            t[1],
            t[2],
            t[3],
            t[4],
            t[5],
            ms(r.chain3_cpu.median)
        );
    }
    println!(
        "\nMedian ms: lazor chain3 fused 1/sync, x{batch}/sync | copy 1/submit, x{batch} | kernel copy 1/submit, \
         x{batch} | raw scalar 1/submit, x{batch} | raw vec4 1/submit, x{batch}\n"
    );
    for r in &results {
        let t = |p: Pair| format!("{}, {}", ms(p.one.median), ms(p.many.median));
        println!(
            "- {}: {}, {} | {} | {} | {} | {}",
            size_name(r.n),
            ms(r.chain3_fused().median),
            ms(r.chain3_pipelined.median),
            t(r.copy),
            t(r.copy_kernel),
            t(r.chain3_scalar),
            t(r.chain3_vec4)
        );
    }

    println!("\n### Read-back of one output (4 bytes/element), raw wgpu, ms\n");
    println!(
        "Steps as in lazor's `to_vec`: copy into a MAP_READ staging buffer + submit + wait, `map_async` + wait, \
         copy out of the mapping into a new Vec. `fresh` creates the staging buffer each time (lazor does so above \
         64 MiB). Last column: lazor chain3 fused `to_vec` minus device-resident.\n"
    );
    println!(
        "| elements | copy+wait | map+wait | copy out | total | GB/s | fresh: create | fresh: copy+wait | fresh: \
         map+wait | fresh: copy out | fresh total | lazor to_vec - resident |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let reused: Duration = r.read_reused.iter().map(|t| t.median).sum();
        let fresh: Duration = r.read_fresh.iter().map(|t| t.median).sum();
        let lazor =
            r.rows[0].1.readback[0].expect("chain3").median.as_secs_f64() - r.chain3_fused().median.as_secs_f64();
        let f = |t: &[Timing]| t.iter().map(|t| ms(t.median)).collect::<Vec<_>>().join(" | ");
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {:.3} |",
            size_name(r.n),
            f(&r.read_reused),
            ms(reused),
            gbs(r.n as u64 * 4, reused),
            f(&r.read_fresh),
            ms(fresh),
            lazor * 1e3
        );
    }
    true
}
