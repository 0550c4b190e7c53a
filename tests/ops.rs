//! Every op against the CPU reference: random data, broadcast shapes, odd sizes, NaN and infinities, ops' own
//! edges (half-way values, relative accuracy near 0), and random expression trees (proptest), fused and unfused.

mod common;

use common::{apply_binary, assert_close, check, close, devices, Rng};
use lazor::op::{BinaryOp, Class, UnaryOp};
use lazor::{Device, Tensor};
use proptest::prelude::*;

/// Tolerances per op: exact-ish arithmetic, looser transcendental functions (GPU `exp`, `tanh`, `pow` are a few
/// ulp off the CPU's).
fn tolerance_unary(op: UnaryOp) -> (f32, f32) {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Square => (0.0, 0.0),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign => (0.0, 0.0),
        UnaryOp::Sin | UnaryOp::Cos => (1e-4, 2e-5),
        // Relative everywhere, near 0 too: what these ops are for.
        UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Erf => (1e-5, 0.0),
        _ => (2e-5, 1e-6),
    }
}

/// Binary ops' tolerances: GPU `pow` is `exp2(b log2(a))`, whose error grows with the result's exponent.
fn tolerance_binary(op: BinaryOp) -> (f32, f32) {
    match op {
        BinaryOp::Pow => (1e-5, 0.0),
        _ => (1e-6, 0.0),
    }
}

fn apply_unary(t: &Tensor, op: UnaryOp) -> Tensor {
    match op {
        UnaryOp::Neg => -t,
        UnaryOp::Exp => t.exp(),
        UnaryOp::Ln => t.ln(),
        UnaryOp::Sqrt => t.sqrt(),
        UnaryOp::Rsqrt => t.rsqrt(),
        UnaryOp::Abs => t.abs(),
        UnaryOp::Relu => t.relu(),
        UnaryOp::Sigmoid => t.sigmoid(),
        UnaryOp::Tanh => t.tanh(),
        UnaryOp::Sin => t.sin(),
        UnaryOp::Cos => t.cos(),
        UnaryOp::Recip => t.recip(),
        UnaryOp::Square => t.square(),
        UnaryOp::Gelu => t.gelu(),
        UnaryOp::Silu => t.silu(),
        UnaryOp::Log1p => t.log1p(),
        UnaryOp::Expm1 => t.expm1(),
        UnaryOp::Erf => t.erf(),
        UnaryOp::Floor => t.floor(),
        UnaryOp::Ceil => t.ceil(),
        UnaryOp::Round => t.round(),
        UnaryOp::Sign => t.sign(),
        UnaryOp::Not => !t,
    }
}

/// Values that exercise each op where it is defined and at its edges.
fn domain(op: UnaryOp) -> (f32, f32) {
    match op {
        UnaryOp::Ln | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.01, 100.0),
        UnaryOp::Log1p => (-0.999, 10.0),
        UnaryOp::Exp => (-80.0, 80.0),
        UnaryOp::Expm1 => (-20.0, 80.0),
        UnaryOp::Erf => (-5.0, 5.0),
        UnaryOp::Sin | UnaryOp::Cos => (-10.0, 10.0),
        _ => (-20.0, 20.0),
    }
}

#[test]
fn unary_ops_match_the_reference_on_random_data() {
    for dev in devices() {
        let mut rng = Rng::new(11);
        for (k, op) in UnaryOp::ALL.into_iter().filter(|op| op.supports(Class::Float)).enumerate() {
            // Odd sizes, one past a workgroup, many workgroups.
            let n = [1, 255, 257, 10_007][k % 4];
            let (lo, hi) = domain(op);
            let x = Tensor::from_vec_on(rng.vec(n, lo, hi), [n], &dev);
            let (rel, abs) = tolerance_unary(op);
            check(&apply_unary(&x, op), rel, abs, op.name());
        }
    }
}

#[test]
fn an_op_and_a_constant_op_after_it_match_the_reference() {
    // The CPU backend runs these pairs as one loop; its values must be the reference's bits.
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    for dev in devices() {
        let mut rng = Rng::new(21);
        let n = 3000;
        let a = Tensor::from_vec_on(rng.vec(n, -3.0, 3.0), [n], &dev);
        let b = Tensor::from_vec_on(rng.vec(n, 0.5, 3.0), [n], &dev);
        let k = Tensor::scalar_on(1.7, &dev);
        for op1 in ops {
            for op2 in ops {
                let inner = apply_binary(&a, &b, op1);
                // GPU compilers may contract a product and a sum into one fused multiply-add, which rounds once.
                let (rel, abs) = if dev.is_cpu() { (0.0, 0.0) } else { (1e-5, 1e-5) };
                for (t, side) in [(apply_binary(&inner, &k, op2), "right"), (apply_binary(&k, &inner, op2), "left")] {
                    let what = format!("{}({}(a, b), 1.7) constant {side}", op2.name(), op1.name());
                    check(&t, rel, abs, &what);
                }
            }
        }
    }
}

#[test]
fn an_activation_of_an_op_matches_unfused_and_the_reference() {
    // The CPU backend runs `u(a op b)` as one loop: its bits must be those of the two ops run apart.
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    let acts = [UnaryOp::Exp, UnaryOp::Sqrt, UnaryOp::Relu, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Abs];
    for dev in devices() {
        let mut rng = Rng::new(22);
        let n = 3000;
        let a = Tensor::from_vec_on(rng.vec(n, -3.0, 3.0), [n], &dev);
        let b = Tensor::from_vec_on(rng.vec(n, 0.5, 3.0), [n], &dev);
        let k = Tensor::scalar_on(0.7, &dev);
        for u in acts {
            for op in ops {
                for (x, y, form) in [(&a, &b, "a, b"), (&a, &k, "a, 0.7"), (&k, &a, "0.7, a")] {
                    let t = apply_unary(&apply_binary(x, y, op), u);
                    let what = format!("{}({}({form}))", u.name(), op.name());
                    let (rel, abs) = tolerance_unary(u);
                    let fused = check(&t, rel.max(1e-5), abs.max(1e-5), &what);
                    if dev.is_cpu() {
                        dev.set_fusion(false);
                        let apart = apply_unary(&apply_binary(x, y, op), u).to_vec();
                        dev.set_fusion(true);
                        for (i, (f, p)) in fused.iter().zip(&apart).enumerate() {
                            assert_eq!(f.to_bits(), p.to_bits(), "{what}: element {i}: fused {f}, apart {p}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn binary_ops_match_the_reference_on_broadcast_shapes() {
    for dev in devices() {
        let mut rng = Rng::new(12);
        let shapes: [(&[usize], &[usize]); 7] = [
            (&[33], &[33]),
            (&[2, 3], &[3]),
            (&[4, 1], &[1, 5]),
            (&[3, 1, 5], &[4, 1]),
            (&[], &[7]),
            (&[2, 3, 4, 5], &[1, 1, 4, 1]),
            (&[1], &[300]),
        ];
        for op in BinaryOp::ALL.into_iter().filter(|&op| op.supports(Class::Float)) {
            let (rel, abs) = tolerance_binary(op);
            for (sa, sb) in shapes {
                let na: usize = sa.iter().product();
                let nb: usize = sb.iter().product();
                let a = Tensor::from_vec_on(rng.vec(na, -10.0, 10.0), sa, &dev);
                let b = Tensor::from_vec_on(rng.vec(nb, 0.5, 10.0), sb, &dev);
                let what = format!("{} {sa:?} {sb:?}", op.name());
                check(&apply_binary(&a, &b, op), rel, abs, &what);
                check(&apply_binary(&b, &a, op), rel, abs, &what);
            }
        }
    }
}

#[test]
fn powf_follows_f32_rules() {
    for dev in devices() {
        let base = vec![-2.0, -0.5, 0.0, -0.0, 0.5, 2.0, 3.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0, -1.0];
        let x = Tensor::from_vec_on(base.clone(), [base.len()], &dev);
        for e in [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.5, 2.5, -0.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e9]
        {
            let want: Vec<f32> = x.to_vec().iter().map(|v| v.powf(e)).collect();
            let got = x.powf(e).to_vec();
            assert_close(&got, &want, 1e-5, 1e-6, &format!("powf({e})"));
        }
    }
}

#[test]
fn ieee_special_values_behave_as_on_the_cpu() {
    for dev in devices() {
        // With half-way values (for rounding) and tiny ones (for log1p and expm1).
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
            -1e30,
            3.5,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            1e-7,
            -3e-8,
        ];
        let n = special.len();
        let x = Tensor::from_vec_on(special.to_vec(), [n], &dev);
        // x / 0 = ±inf (or NaN for 0/0), sqrt(-1) = NaN, NaN propagates.
        let mut failures = Vec::new();
        let zero = Tensor::zeros_on([n], &dev);
        check(&(&x / &zero), 0.0, 0.0, "x / 0");
        check(&(Tensor::scalar_on(-1.0, &dev).sqrt()), 0.0, 0.0, "sqrt(-1)");
        for op in UnaryOp::ALL.into_iter().filter(|op| op.supports(Class::Float)) {
            let (rel, abs) = tolerance_unary(op);
            // Transcendentals at ±1e30 are not meaningful on a GPU (sin/cos argument reduction), skip just those.
            let inputs: Vec<f32> = match op {
                UnaryOp::Sin | UnaryOp::Cos => {
                    special.iter().copied().filter(|v| v.abs() < 1e3 || !v.is_finite()).collect()
                }
                _ => special.to_vec(),
            };
            let t = Tensor::from_vec_on(inputs.clone(), [inputs.len()], &dev);
            failures.extend(mismatch(&apply_unary(&t, op), rel, abs, op.name()));
        }
        // Comparisons too: every comparison with NaN is false except `ne`.
        for op in BinaryOp::ALL.into_iter().filter(|&op| op.supports(Class::Float)) {
            let (rel, abs) = tolerance_binary(op);
            // All pairs of specials, through broadcasting [n, 1] x [n].
            let a = Tensor::from_vec_on(special.to_vec(), [n, 1], &dev);
            failures.extend(mismatch(&apply_binary(&a, &x, op), rel, abs, op.name()));
            // And same-shaped (vectorized) operands.
            let pairs: Vec<(f32, f32)> = special.iter().flat_map(|&p| special.iter().map(move |&q| (p, q))).collect();
            let l = Tensor::from_vec_on(pairs.iter().map(|p| p.0).collect(), [n * n], &dev);
            let r = Tensor::from_vec_on(pairs.iter().map(|p| p.1).collect(), [n * n], &dev);
            failures.extend(mismatch(&apply_binary(&l, &r, op), rel, abs, op.name()));
        }
        assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    }
}

#[test]
fn log1p_expm1_and_erf_keep_their_relative_accuracy_near_0() {
    // Down to 1e-30, where `ln(1 + x)` and `e^x - 1` have no digit left, and every 0.01 over [-4, 4], across the
    // branches of the helpers. The reference is libm's `ln_1p` and `exp_m1`, and erf's one formula.
    let mut xs: Vec<f32> = (0..=120).map(|e| 10f32.powf(-e as f32 / 4.0)).flat_map(|v| [v, -v]).collect();
    xs.extend((-400..=400).map(|i| i as f32 / 100.0));
    xs.extend([0.0, -0.0, 88.7, 88.72283, 88.72284, -17.4, -17.6, 1e38, -0.999_999_94, -1.0, 3.9, 4.1]);
    for dev in devices() {
        let x = Tensor::from_vec_on(xs.clone(), [xs.len()], &dev);
        for op in [UnaryOp::Log1p, UnaryOp::Expm1, UnaryOp::Erf] {
            let got = check(&apply_unary(&x, op), 1e-6, 0.0, op.name());
            // ±0 keeps its sign: 1 / op(-0) is -inf on every backend.
            let zero = xs.iter().position(|v| *v == 0.0 && v.is_sign_negative()).unwrap();
            assert!(got[zero] == 0.0 && got[zero].is_sign_negative(), "{}(-0) on {}", op.name(), dev.name());
        }
    }
}

#[test]
fn floor_ceil_round_and_sign_at_their_edges() {
    let inf = f32::INFINITY;
    let xs = [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 2.499_999_8, -7.25, 8388609.0, inf, -inf];
    for dev in devices() {
        let x = Tensor::from_vec_on(xs.to_vec(), [xs.len()], &dev);
        let bits = |t: Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let want = |f: fn(f32) -> f32| xs.iter().map(|&v| f(v).to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(x.floor()), want(f32::floor), "floor on {}", dev.name());
        assert_eq!(bits(x.ceil()), want(f32::ceil), "ceil on {}", dev.name());
        // Half-way values to the even neighbour, as torch.round: -2.5 -> -2, 0.5 -> 0, 2.5 -> 2.
        assert_eq!(bits(x.round()), want(f32::round_ties_even), "round on {}", dev.name());
        assert_eq!(x.round().to_vec()[..8], [-2.0, -2.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0]);
        let sign = x.sign().to_vec();
        assert_eq!(sign[..6], [-1.0, -1.0, -1.0, -0.0, 0.0, 1.0]);
        assert!(sign[3].is_sign_negative() && sign[12] == -1.0 && sign[11] == 1.0, "{sign:?} on {}", dev.name());
        let nan = Tensor::from_vec_on(vec![f32::NAN], [1], &dev);
        for t in [nan.floor(), nan.ceil(), nan.round(), nan.sign()] {
            assert!(t.to_vec()[0].is_nan(), "NaN stays NaN on {}", dev.name());
        }
        // Integers: whole already, and sign in their own type.
        let i = Tensor::from_vec_on(vec![i32::MIN, -7, 0, 9, i32::MAX], [5], &dev);
        assert_eq!(i.floor().to_vec_as::<i32>(), vec![i32::MIN, -7, 0, 9, i32::MAX]);
        assert_eq!(i.round().dtype(), lazor::DType::I32);
        assert_eq!(i.sign().to_vec_as::<i32>(), vec![-1, -1, 0, 1, 1]);
        let u = Tensor::from_vec_on(vec![0u32, 3, u32::MAX], [3], &dev);
        assert_eq!(u.sign().to_vec_as::<u32>(), vec![0, 1, 1]);
        assert_eq!(u.ceil().to_vec_as::<u32>(), vec![0, 3, u32::MAX]);
    }
}

#[test]
fn pow_between_tensors_broadcasts_and_follows_powf() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![2.0, -2.0, 0.0, 9.0], [4, 1], &dev);
        let b = Tensor::from_vec_on(vec![3.0, 0.5, -1.0], [3], &dev);
        let got = a.pow(&b).to_vec();
        let want: Vec<f32> =
            [2.0f32, -2.0, 0.0, 9.0].iter().flat_map(|x| [3.0, 0.5, -1.0].map(|e| x.powf(e))).collect();
        common::assert_close(&got, &want, 1e-6, 0.0, "pow");
        assert_eq!(a.pow(&b).shape(), &[4, 3]);
        // Integers compute in f32, as powf does.
        let i = Tensor::from_vec_on(vec![2i32, 3], [2], &dev);
        assert_eq!(i.pow(&i).dtype(), lazor::DType::F32);
        assert_eq!(i.pow(&i).to_vec(), vec![4.0, 27.0]);
        let e = a.try_pow(&Tensor::zeros_on([5, 2], &dev)).unwrap_err().to_string();
        assert!(e.contains("pow") && e.contains("[4, 1]"), "{e}");
    }
}

/// Every element where `t` differs from the reference, described.
fn mismatch(t: &Tensor, rel: f32, abs: f32, what: &str) -> Vec<String> {
    let want = lazor::reference::eval(&[t]).pop().unwrap();
    let got = t.to_dtype(lazor::DType::F32).to_vec();
    got.iter()
        .zip(&want)
        .enumerate()
        .filter(|(_, (g, w))| !close(**g, **w, rel, abs))
        .map(|(i, (g, w))| format!("{what} on specials, element {i}: got {g}, want {w}"))
        .collect()
}

/// A random expression: leaves are random tensors whose shapes broadcast to `shape`, or scalars.
fn random_expr(dev: &Device, rng: &mut Rng, shape: &[usize], depth: usize) -> Tensor {
    if depth == 0 || rng.below(4) == 0 {
        if rng.below(5) == 0 {
            return Tensor::scalar_on(rng.uniform(-2.0, 2.0), dev);
        }
        // Drop leading axes and set some axes to 1: still broadcasts to `shape`.
        let skip = rng.below(shape.len() + 1);
        let sub: Vec<usize> = shape[skip..].iter().map(|&d| if rng.below(3) == 0 { 1 } else { d }).collect();
        let n = sub.iter().product();
        return Tensor::from_vec_on(rng.vec(n, -2.0, 2.0), sub, dev);
    }
    let a = random_expr(dev, rng, shape, depth - 1);
    match rng.below(10) {
        0 => a.tanh(),
        1 => a.sigmoid(),
        2 => a.abs().sqrt(),
        3 => a.silu(),
        4 => -a,
        _ => {
            let b = random_expr(dev, rng, shape, depth - 1);
            match rng.below(6) {
                0 => &a + &b,
                1 => &a - &b,
                2 => &a * &b,
                3 => &a / (b.abs() + 0.5),
                4 => a.maximum(&b),
                _ => a.minimum(&b),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_expressions_match_the_reference(
        seed in any::<u64>(),
        shape in proptest::collection::vec(1usize..6, 0..4),
        depth in 1usize..7,
        fuse in any::<bool>(),
    ) {
        // One device for all cases: a real driver may refuse hundreds of devices made in a row.
        static DEVS: std::sync::OnceLock<Vec<Device>> = std::sync::OnceLock::new();
        for dev in DEVS.get_or_init(devices) {
        dev.set_fusion(fuse);
        let before = dev.stats();
        let mut rng = Rng::new(seed);
        let e = random_expr(dev, &mut rng, &shape, depth);
        // The expression may broadcast to less than `shape` when every leaf dropped an axis.
        let want = lazor::reference::eval(&[&e]).pop().unwrap();
        let got = e.to_vec();
        prop_assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!(close(*g, *w, 1e-4, 1e-5), "element {}: got {}, want {}", i, g, w);
        }
        let s = dev.stats();
        prop_assert!(s.submits - before.submits <= 2, "reference read-back and the realize");
        if fuse {
            prop_assert!(s.dispatches - before.dispatches <= 1, "a fused tree of one output is at most one kernel");
        }
        }
    }
}
