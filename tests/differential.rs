//! Differential testing: random programs over the public API, run on every backend fused and unfused, checked
//! against the reference interpreter within error bounds propagated op by op. A failing program is shrunk to a
//! minimal one and printed as Rust.
//!
//! CI runs 4000 programs on the CPU backend and the first 1000 of them on wgpu too. A long run is
//! `LAZOR_FUZZ_PROGRAMS=20000 cargo test --release --test differential`. Knobs (see docs/ENVIRONMENT.md):
//! `LAZOR_FUZZ_GPU_PROGRAMS` (how many run on wgpu; all of them when `LAZOR_FUZZ_PROGRAMS` is set),
//! `LAZOR_FUZZ_SEED` (the first seed), `LAZOR_FUZZ_FUSION=on|off` (one fusion setting), `LAZOR_FUZZ_KEEP_GOING=1`
//! (report every failure), `LAZOR_FUZZ_DUMP=file.jsonl` (each program with lazor's results and bounds, for
//! `benches/differential_torch.py` to replay in PyTorch, float64), `LAZOR_FUZZ_SHOW=1` (print each program).

#[path = "differential/bounds.rs"]
mod bounds;
mod common;
#[path = "differential/gen.rs"]
mod gen;
#[path = "differential/json.rs"]
mod json;
#[path = "differential/program.rs"]
mod program;

use lazor::{DType, Device, Tensor};
use program::{build, to_rust, Program, Read, Step};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What the reference says about a program: every step's lanes, and the outputs' bounds.
struct Expected {
    lanes: Vec<Vec<u32>>,
    dtypes: Vec<DType>,
    shapes: Vec<Vec<usize>>,
    bounds: Vec<Vec<f32>>,
}

fn expected(p: &Program) -> Expected {
    let scratch = Device::cpu();
    let vals = build(p, &scratch);
    let lanes = lazor::reference::eval_lanes(&vals.iter().collect::<Vec<_>>());
    let dtypes: Vec<DType> = vals.iter().map(|t| t.dtype()).collect();
    let shapes: Vec<Vec<usize>> = vals.iter().map(|t| t.shape().to_vec()).collect();
    let bdev = Device::cpu();
    let mut r: Vec<Tensor> = Vec::new();
    let mut b: Vec<Tensor> = Vec::new();
    for (i, step) in p.steps.iter().enumerate() {
        let f: Vec<f32> = lanes[i].iter().map(|&l| f32::from_bits(DType::F32.cast_lane(dtypes[i], l))).collect();
        let ro = Tensor::from_vec_on(f, shapes[i].clone(), &bdev);
        let bi = bounds::bound(step, &r, &b, &ro, dtypes[i], &bdev);
        assert_eq!(bi.shape(), ro.shape(), "the bound of {step:?} has another shape than its value");
        b.push(bi);
        r.push(ro);
    }
    let outs: Vec<&Tensor> = p.outputs.iter().map(|&o| &b[o]).collect();
    let bounds = lazor::reference::eval(&outs);
    for (k, &o) in p.outputs.iter().enumerate() {
        assert_eq!(bounds[k].len(), lanes[o].len(), "bounds of t{o} ({:?}): {}", b[o].shape(), to_rust(p));
    }
    Expected { lanes, dtypes, shapes, bounds }
}

/// The device's lanes of every output, read as the program says.
fn run(p: &Program, dev: &Device) -> Vec<Vec<u32>> {
    let vals = build(p, dev);
    let outs: Vec<&Tensor> = p.outputs.iter().map(|&o| &vals[o]).collect();
    match p.read {
        Read::EachToVec => {}
        Read::Together => lazor::realize(&outs).unwrap_or_else(|e| panic!("{e}")),
        Read::RealizeEach => outs.iter().for_each(|t| t.realize().unwrap_or_else(|e| panic!("{e}"))),
    }
    outs.iter().map(|t| lazor::reference::device_lanes(t)).collect()
}

fn max_finite(dt: DType) -> f32 {
    match dt {
        DType::F16 => 65504.0,
        _ => f32::MAX,
    }
}

/// Whether `got` is within `bound` of `want` (lanes of `dt`); a NaN or infinite bound accepts anything.
fn agrees(dt: DType, got: u32, want: u32, bound: f32) -> bool {
    if !bound.is_finite() {
        return true;
    }
    if !dt.is_float() {
        return got == want;
    }
    let (g, w) = (f32::from_bits(got), f32::from_bits(want));
    if w.is_nan() || g.is_nan() {
        return w.is_nan() && g.is_nan();
    }
    if w.is_infinite() || g.is_infinite() {
        // An overflow may land either side of the largest finite value where the value was not exact.
        let edge = |x: f32, y: f32| {
            x.is_infinite()
                && y.is_finite()
                && bound > 0.0
                && y.abs() + 2.0 * bound >= max_finite(dt) / 2.0
                && x.signum() == y.signum()
        };
        return g == w || edge(w, g) || edge(g, w);
    }
    (g - w).abs() <= 2.0 * bound + 2f32.powi(-125)
}

/// The first disagreement of `p` on `dev` (fusion as the device has it), or a panic's message.
fn check(p: &Program, want: &Expected, dev: &Device) -> Option<String> {
    let got = match catch_unwind(AssertUnwindSafe(|| run(p, dev))) {
        Ok(got) => got,
        Err(e) => {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            return Some(format!("panicked: {}", msg.unwrap_or_default()));
        }
    };
    for (k, &o) in p.outputs.iter().enumerate() {
        let dt = want.dtypes[o];
        if got[k].len() != want.lanes[o].len() {
            return Some(format!("output t{o}: {} values, want {}", got[k].len(), want.lanes[o].len()));
        }
        for (i, (&g, &w)) in got[k].iter().zip(&want.lanes[o]).enumerate() {
            let bound = want.bounds[k][i];
            if !agrees(dt, g, w, bound) {
                let show = |l: u32| match dt.is_float() {
                    true => format!("{:?}", f32::from_bits(l)),
                    false => format!("{l:#x}"),
                };
                return Some(format!(
                    "output t{o} ({dt}, shape {:?}) element {i}: got {}, want {} (bound {bound:e})",
                    want.shapes[o],
                    show(g),
                    show(w)
                ));
            }
        }
    }
    None
}

/// The steps `outputs` depend on, renumbered in order.
fn prune(p: &Program) -> Program {
    let mut live = vec![false; p.steps.len()];
    for &o in &p.outputs {
        live[o] = true;
    }
    for i in (0..p.steps.len()).rev() {
        if live[i] {
            for x in p.steps[i].inputs() {
                live[x] = true;
            }
        }
    }
    let mut map = vec![usize::MAX; p.steps.len()];
    let mut steps = Vec::new();
    for (i, s) in p.steps.iter().enumerate() {
        if live[i] {
            map[i] = steps.len();
            steps.push(s.renumber(&map));
        }
    }
    Program { steps, outputs: p.outputs.iter().map(|&o| map[o]).collect(), read: p.read }
}

/// Shrinks a failing program: one output, then every step cut to an input holding its reference value while
/// the program still fails, dropping what nothing reads.
fn shrink(p: &Program, fails: &dyn Fn(&Program) -> bool) -> Program {
    let mut best = prune(p);
    for &o in &best.outputs.clone() {
        let one = prune(&Program { outputs: vec![o], ..best.clone() });
        if one.outputs.len() < best.outputs.len() && fails(&one) {
            best = one;
            break;
        }
    }
    loop {
        let mut changed = false;
        let want = expected(&best);
        for i in (0..best.steps.len()).rev() {
            if matches!(best.steps[i], Step::Input { .. }) {
                continue;
            }
            let mut cut = best.clone();
            let dtype = want.dtypes[i];
            cut.steps[i] = Step::Input { shape: want.shapes[i].clone(), dtype, lanes: want.lanes[i].clone() };
            let cut = prune(&cut);
            if fails(&cut) {
                best = cut;
                changed = true;
                break;
            }
        }
        if !changed {
            return best;
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The fusion settings a run covers: `LAZOR_FUZZ_FUSION=on` or `off` for one of them, both by default.
fn fusion_modes() -> Vec<bool> {
    match std::env::var("LAZOR_FUZZ_FUSION").as_deref() {
        Ok("on") => vec![true],
        Ok("off") => vec![false],
        _ => vec![true, false],
    }
}

/// The first disagreement of `p` on `dev` with fusion `fuse`, shrunk and printed, or `None`. Fused programs of
/// odd seeds run with independent kernels grouped into shared dispatches (`Device::set_grouping`).
fn report(seed: u64, p: &Program, want: &Expected, dev: &Device, fuse: bool) -> Option<String> {
    let group = fuse && seed % 2 == 1;
    dev.set_grouping(group);
    dev.set_fusion(fuse);
    let why = check(p, want, dev)?;
    let fails = |q: &Program| {
        let w = expected(q);
        dev.set_fusion(fuse);
        check(q, &w, dev).is_some()
    };
    let small = shrink(p, &fails);
    let w = expected(&small);
    dev.set_fusion(fuse);
    let small_why = check(&small, &w, dev).unwrap_or_default();
    Some(format!(
        "differential: seed {seed} fails on {} (fusion {}, grouping {}): {why}\nshrunk ({} steps): {small_why}\n{}",
        dev.name(),
        if fuse { "on" } else { "off" },
        if group { "on" } else { "off" },
        small.steps.len(),
        to_rust(&small)
    ))
}

/// Runs `count` programs from `first_seed` on the CPU backend and the first `gpu_count` of them on the wgpu
/// backends too (compiling each new kernel is what costs there), fused and unfused; panics with the shrunk
/// program of the first failure, or with every failure's under `LAZOR_FUZZ_KEEP_GOING=1`.
fn fuzz(first_seed: u64, count: usize, gpu_count: usize, max_steps: usize) {
    let devs = common::devices();
    let scratch = Device::cpu();
    let keep_going = std::env::var("LAZOR_FUZZ_KEEP_GOING").is_ok();
    let mut dump = std::env::var("LAZOR_FUZZ_DUMP")
        .ok()
        .map(|path| std::fs::File::create(&path).unwrap_or_else(|e| panic!("creating {path}: {e}")));
    let started = std::time::Instant::now();
    let (mut steps, mut checked, mut unchecked) = (0, 0, 0);
    let mut failures: Vec<String> = Vec::new();
    for seed in first_seed..first_seed + count as u64 {
        let p = gen::generate(seed, max_steps, &scratch);
        let want = expected(&p);
        steps += p.steps.len();
        for b in &want.bounds {
            checked += b.iter().filter(|b| b.is_finite()).count();
            unchecked += b.iter().filter(|b| !b.is_finite()).count();
        }
        if std::env::var("LAZOR_FUZZ_SHOW").is_ok() {
            eprintln!("seed {seed}:\n{}", to_rust(&p));
        }
        let on_gpu = seed < first_seed + gpu_count as u64;
        for dev in devs.iter().filter(|d| d.is_cpu() || on_gpu) {
            for fuse in fusion_modes() {
                if let Some(failure) = report(seed, &p, &want, dev, fuse) {
                    assert!(keep_going, "{failure}");
                    eprintln!("{failure}");
                    failures.push(failure);
                }
            }
            dev.set_fusion(true);
            dev.set_grouping(false);
        }
        if let Some(file) = dump.as_mut() {
            use std::io::Write;
            let got = run(&p, &devs[devs.len() - 1]);
            let line = json::program_line(seed, &p, &want.shapes, &want.dtypes, &got, &want.bounds);
            writeln!(file, "{line}").expect("writing the dump");
        }
        if (seed - first_seed + 1) % 500 == 0 {
            eprintln!("differential: {} programs, {:.1?}", seed - first_seed + 1, started.elapsed());
        }
    }
    eprintln!(
        "differential: {count} programs ({steps} steps) from seed {first_seed}, {} of them on {} backends, fusion \
         {:?}, in {:.1?}: {checked} output elements checked, {unchecked} not determined to within rounding, {} \
         failures",
        gpu_count.min(count),
        devs.len(),
        fusion_modes(),
        started.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} programs failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn random_programs_agree_with_the_reference() {
    let seed = env_usize("LAZOR_FUZZ_SEED", 0) as u64;
    let count = env_usize("LAZOR_FUZZ_PROGRAMS", 4000);
    let gpu_default = if std::env::var("LAZOR_FUZZ_PROGRAMS").is_ok() { count } else { 1000 };
    fuzz(seed, count, env_usize("LAZOR_FUZZ_GPU_PROGRAMS", gpu_default), 25);
}

#[test]
fn shrinking_finds_the_step_that_fails() {
    // A program whose last step the check rejects (a wrong bound of 0 on a transcendental would not do: this
    // asks for a value the reference never gives), shrunk to that step and its input.
    let p = Program {
        steps: vec![
            Step::Input { shape: vec![3], dtype: DType::F32, lanes: [1.0f32, 2.0, 3.0].map(f32::to_bits).to_vec() },
            Step::Unary { op: lazor::op::UnaryOp::Exp, x: 0 },
            Step::Scalar { op: lazor::op::BinaryOp::Mul, x: 1, s: program::Num::F(2.0), left: false },
            Step::Unary { op: lazor::op::UnaryOp::Neg, x: 2 },
        ],
        outputs: vec![3, 1],
        read: Read::Together,
    };
    // "Fails" while it still computes a negation of a product: the shrinker must keep exactly those.
    let fails = |q: &Program| {
        let neg = q.steps.iter().any(|s| matches!(s, Step::Unary { op: lazor::op::UnaryOp::Neg, .. }));
        let mul = q.steps.iter().any(|s| matches!(s, Step::Scalar { .. }));
        neg && mul
    };
    let small = shrink(&p, &fails);
    assert_eq!(small.outputs.len(), 1);
    assert_eq!(small.steps.len(), 3, "{}", to_rust(&small));
    assert!(matches!(small.steps[0], Step::Input { .. }));
    let rust = to_rust(&small);
    assert!(rust.contains("* 2.0f32") && rust.contains("-&t1"), "{rust}");
}

#[test]
fn the_check_rejects_wrong_values_and_accepts_rounding() {
    assert!(agrees(DType::F32, 1.0f32.to_bits(), 1.0f32.to_bits(), 0.0));
    assert!(!agrees(DType::F32, 1.0001f32.to_bits(), 1.0f32.to_bits(), 1e-6));
    assert!(agrees(DType::F32, 1.000001f32.to_bits(), 1.0f32.to_bits(), 1e-6));
    assert!(!agrees(DType::F32, 0.0f32.to_bits(), f32::NAN.to_bits(), 1.0));
    assert!(agrees(DType::F32, 0.0f32.to_bits(), f32::NAN.to_bits(), f32::INFINITY));
    assert!(!agrees(DType::I32, 3, 4, 0.0));
    assert!(!agrees(DType::F32, f32::INFINITY.to_bits(), 1.0f32.to_bits(), 1e-3));
}
