//! Element types against the CPU reference on every backend: every op on every dtype it takes, promotion, casts
//! at the edges, comparisons with NaN, where_cond, argmax/argmin, reductions per dtype, both f16 storage paths,
//! storage sizes, fusion counts and the errors.

mod common;

use common::{apply_binary, assert_close, check, devices, gpu_devices, Rng};
use lazor::half::{bf16, f16};
use lazor::op::{BinaryOp, UnaryOp};
use lazor::{DType, Device, Element, Tensor};

/// Random values of `dt` as a tensor: floats in [-8, 8) with some integers, integers over their whole range and
/// near 0, bools at random.
fn random(dev: &Device, rng: &mut Rng, dt: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let f: Vec<f32> =
        (0..n).map(|i| if i % 7 == 3 { (rng.below(9) as f32) - 4.0 } else { rng.uniform(-8.0, 8.0) }).collect();
    match dt {
        DType::F32 => Tensor::from_vec_on(f, shape, dev),
        DType::F16 => Tensor::from_vec_on(f.iter().map(|&x| f16::from_f32(x)).collect(), shape, dev),
        DType::BF16 => Tensor::from_vec_on(f.iter().map(|&x| bf16::from_f32(x)).collect(), shape, dev),
        DType::I32 => Tensor::from_vec_on(
            (0..n).map(|i| if i % 3 == 0 { rng.next_u64() as i32 } else { rng.below(21) as i32 - 10 }).collect(),
            shape,
            dev,
        ),
        DType::U32 => Tensor::from_vec_on(
            (0..n).map(|i| if i % 3 == 0 { rng.next_u64() as u32 } else { rng.below(21) as u32 }).collect(),
            shape,
            dev,
        ),
        DType::Bool => Tensor::from_vec_on((0..n).map(|_| rng.below(2) == 1).collect::<Vec<bool>>(), shape, dev),
    }
}

/// Tolerance of a dtype's float results: a few units in the last place of the type.
fn tol(dt: DType) -> (f32, f32) {
    match dt {
        DType::F16 => (2e-3, 1e-4),
        DType::BF16 => (1.6e-2, 1e-3),
        _ => (2e-5, 1e-6),
    }
}

/// The unary ops swept: every one with an integer or bool form, and float math of each kind.
const UNARY: [UnaryOp; 18] = [
    UnaryOp::Neg,
    UnaryOp::Not,
    UnaryOp::Abs,
    UnaryOp::Relu,
    UnaryOp::Square,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Sign,
    UnaryOp::Log1p,
    UnaryOp::Expm1,
    UnaryOp::Erf,
    UnaryOp::Exp,
    UnaryOp::Sqrt,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Sin,
    UnaryOp::Silu,
];

fn apply_unary(t: &Tensor, op: UnaryOp) -> Tensor {
    match op {
        UnaryOp::Neg => -t,
        UnaryOp::Not => !t,
        UnaryOp::Abs => t.abs(),
        UnaryOp::Relu => t.relu(),
        UnaryOp::Square => t.square(),
        UnaryOp::Exp => t.exp(),
        UnaryOp::Sqrt => t.abs().sqrt(),
        UnaryOp::Tanh => t.tanh(),
        UnaryOp::Sigmoid => t.sigmoid(),
        UnaryOp::Sin => t.sin(),
        UnaryOp::Silu => t.silu(),
        UnaryOp::Floor => t.floor(),
        UnaryOp::Ceil => t.ceil(),
        UnaryOp::Round => t.round(),
        UnaryOp::Sign => t.sign(),
        UnaryOp::Log1p => t.log1p(),
        UnaryOp::Expm1 => t.expm1(),
        UnaryOp::Erf => t.erf(),
        op => unreachable!("{} is not in UNARY", op.name()),
    }
}

/// The devices to test, each GPU twice: native f16 storage (where the adapter has it) and packed.
fn f16_paths() -> Vec<(Device, &'static str)> {
    let mut out = Vec::new();
    for dev in devices() {
        if dev.is_cpu() {
            out.push((dev, "cpu"));
            continue;
        }
        let packed = Device::new().expect("a second wgpu device");
        if let Some(gpu) = packed.wgpu() {
            gpu.set_native_f16(false);
        }
        assert!(!packed.wgpu().is_some_and(|g| g.native_f16()));
        out.push((dev, "gpu"));
        out.push((packed, "gpu, f16 packed"));
    }
    out
}

#[test]
fn values_round_trip_through_every_dtype() {
    fn round_trip<T: Element + PartialEq>(dev: &Device, values: Vec<T>) {
        let n = values.len();
        let t = Tensor::from_vec_on(values.clone(), [n], dev);
        assert_eq!(t.dtype(), T::DTYPE);
        assert_eq!(t.to_vec_as::<T>(), values, "{} x {n} read back", T::DTYPE);
        // Through a kernel (a copy of the values), at every length mod 4.
        let copy = t.reshape([n]).contiguous();
        assert_eq!(copy.to_vec_as::<T>(), values, "{} x {n} through a kernel", T::DTYPE);
    }
    for (dev, _) in f16_paths() {
        for n in [0, 1, 2, 3, 5, 255, 1027] {
            let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 3.0).collect();
            round_trip(&dev, f.clone());
            round_trip(&dev, f.iter().map(|&x| f16::from_f32(x)).collect());
            round_trip(&dev, f.iter().map(|&x| bf16::from_f32(x)).collect());
            round_trip(&dev, (0..n).map(|i: i32| i.wrapping_mul(-2_000_003)).collect());
            round_trip(&dev, (0..n).map(|i| (i as u32).wrapping_mul(3_000_000_019)).collect());
            round_trip(&dev, (0..n).map(|i| i % 3 == 1).collect());
        }
    }
}

#[test]
fn every_unary_op_on_every_dtype_it_takes() {
    for (dev, path) in f16_paths() {
        let mut rng = Rng::new(21);
        for dt in DType::ALL {
            // Float math on integers and bools computes in f32; `not` is for integers and bools only.
            for op in UNARY.into_iter().filter(|&op| op != UnaryOp::Not || !dt.is_float()) {
                for n in [1, 7, 1000, 4099] {
                    let mut x = random(&dev, &mut rng, dt, &[n]);
                    // GPU sines lose accuracy far from 0 (their argument reduction is short): the NVIDIA driver's
                    // is 6e-5 off at 956. Within +-10, as in tests/ops.rs.
                    if op == UnaryOp::Sin && dt.is_int() {
                        x = &x % 10i32;
                    }
                    let y = apply_unary(&x, op);
                    let (rel, abs) = tol(y.dtype());
                    // GPU sines are a few ulp off the CPU's (as in tests/ops.rs).
                    let (rel, abs) = if op == UnaryOp::Sin { (rel.max(1e-4), abs.max(2e-5)) } else { (rel, abs) };
                    check(&y, rel, abs, &format!("{} on {dt} x {n} ({path})", op.name()));
                }
            }
        }
    }
}

#[test]
fn every_binary_op_on_every_dtype_it_takes_with_broadcast() {
    let shapes: [(&[usize], &[usize]); 5] =
        [(&[33], &[33]), (&[2, 3], &[3]), (&[4, 1], &[1, 5]), (&[300, 4], &[300, 4]), (&[], &[7])];
    for (dev, path) in f16_paths() {
        let mut rng = Rng::new(22);
        for dt in DType::ALL {
            for op in BinaryOp::ALL {
                if !op.supports(dt.class()) {
                    continue;
                }
                for (sa, sb) in shapes {
                    let a = random(&dev, &mut rng, dt, sa);
                    let b = random(&dev, &mut rng, dt, sb);
                    let y = apply_binary(&a, &b, op);
                    assert_eq!(y.dtype(), if op.is_compare() { DType::Bool } else { dt }, "{}", op.name());
                    let (rel, abs) = tol(dt);
                    // GPU pow is `exp2(b log2(a))`: its error grows with the result's exponent (as in tests/ops.rs).
                    let (rel, abs) = if op == BinaryOp::Pow { (rel.max(1e-5), abs) } else { (rel, abs) };
                    check(&y, rel, abs, &format!("{} on {dt} {sa:?} {sb:?} ({path})", op.name()));
                }
            }
        }
    }
}

#[test]
fn integer_arithmetic_wraps_and_divides_as_documented() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![i32::MAX, i32::MIN, -7, 7, -7, 5, i32::MIN, 9], [8], &dev);
        let b = Tensor::from_vec_on(vec![1, -1, 2, -2, 0, 0, -1, 4], [8], &dev);
        assert_eq!((&a + &b).to_vec_as::<i32>(), vec![i32::MIN, i32::MAX, -5, 5, -7, 5, i32::MAX, 13]);
        // Truncating toward zero; a / 0 = a; i32::MIN / -1 = i32::MIN.
        assert_eq!((&a / &b).to_vec_as::<i32>(), vec![i32::MAX, i32::MIN, -3, -3, -7, 5, i32::MIN, 2]);
        // The remainder has the dividend's sign; a % 0 = 0.
        assert_eq!((&a % &b).to_vec_as::<i32>(), vec![0, 0, -1, 1, 0, 0, 0, 1]);
        assert_eq!((&a * 2i32).to_vec_as::<i32>()[0], i32::MAX.wrapping_mul(2));
        assert_eq!((-&a).to_vec_as::<i32>()[1], i32::MIN);
        assert_eq!(a.neg().to_vec_as::<i32>()[2], 7);
        assert_eq!(a.abs().to_vec_as::<i32>()[1], i32::MIN);
        let u = Tensor::from_vec_on(vec![0u32, 5, u32::MAX], [3], &dev);
        assert_eq!((&u - 1u32).to_vec_as::<u32>(), vec![u32::MAX, 4, u32::MAX - 1]);
        assert_eq!((-&u).to_vec_as::<u32>(), vec![0, 5u32.wrapping_neg(), 1]);
        assert_eq!((&u / 0u32).to_vec_as::<u32>(), vec![0, 5, u32::MAX]);
        assert_eq!((!&u).to_vec_as::<u32>(), vec![u32::MAX, !5, 0]);
        check(&(&a / &b), 0.0, 0.0, "i32 division against the reference");
        check(&(&a % &b), 0.0, 0.0, "i32 remainder against the reference");
    }
}

#[test]
fn promotion_follows_one_table() {
    let dev = Device::cpu();
    let t = |dt: DType| Tensor::zeros_dtype([2], dt).to_device(&dev);
    let cases = [
        (DType::F32, DType::F16, DType::F32),
        (DType::F16, DType::BF16, DType::F32),
        (DType::BF16, DType::I32, DType::BF16),
        (DType::I32, DType::Bool, DType::I32),
        (DType::Bool, DType::U32, DType::U32),
        (DType::F16, DType::F16, DType::F16),
        (DType::Bool, DType::Bool, DType::Bool),
    ];
    for (a, b, want) in cases {
        assert_eq!((t(a).maximum(&t(b))).dtype(), want, "{a} with {b}");
        assert_eq!((t(b).maximum(&t(a))).dtype(), want, "{b} with {a}");
    }
    let err = t(DType::I32).try_add(&t(DType::U32)).unwrap_err().to_string();
    assert!(err.contains("add") && err.contains("i32") && err.contains("u32"), "{err}");
    // Rust scalars: one of the tensor's kind does not widen it; one of a higher kind lifts it.
    assert_eq!((t(DType::F16) * 2.0).dtype(), DType::F16);
    assert_eq!((t(DType::BF16) + 1i32).dtype(), DType::BF16);
    assert_eq!((t(DType::I32) * 0.5).dtype(), DType::F32);
    assert_eq!((0.5 * t(DType::I32)).dtype(), DType::F32);
    assert_eq!((t(DType::U32) + 1i32).dtype(), DType::U32);
    assert_eq!((t(DType::Bool) + 1i32).dtype(), DType::I32);
    assert_eq!((t(DType::Bool) * 2u32).dtype(), DType::U32);
    assert_eq!(t(DType::I32).exp().dtype(), DType::F32, "float math on integers is f32");
    assert_eq!(t(DType::I32).powf(2.0).dtype(), DType::F32);
    // Ops a type does not take, named with the type.
    let square = Tensor::zeros_dtype([2, 2], DType::I32).to_device(&dev);
    for (r, what) in [
        (t(DType::Bool).try_add(&t(DType::Bool)), "add"),
        (t(DType::F32).try_rem(&t(DType::F32)), "rem"),
        (square.try_matmul(&square), "matmul"),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(what) && (e.contains("i32") || e.contains("f32") || e.contains("bool")), "{e}");
    }
}

#[test]
fn casts_at_the_edges_follow_rust_as() {
    let edges = [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -2.7,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        2147483648.0,
        -2147483904.0,
        2147483520.0,
        4294967296.0,
        65504.0,
        65520.0,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        1e-8,
        6.0e-8,
        3.0e38,
    ];
    for (dev, path) in f16_paths() {
        let x = Tensor::from_vec_on(edges.to_vec(), [edges.len()], &dev);
        let want_i: Vec<i32> = edges.iter().map(|&v| v as i32).collect();
        let want_u: Vec<u32> = edges.iter().map(|&v| v as u32).collect();
        let want_b: Vec<bool> = edges.iter().map(|&v| v != 0.0).collect();
        assert_eq!(x.to_dtype(DType::I32).to_vec_as::<i32>(), want_i, "{path}");
        assert_eq!(x.to_dtype(DType::U32).to_vec_as::<u32>(), want_u, "{path}");
        assert_eq!(x.to_dtype(DType::Bool).to_vec_as::<bool>(), want_b, "{path}");
        let h: Vec<u16> = x.to_dtype(DType::F16).to_vec_as::<f16>().iter().map(|v| v.to_bits()).collect();
        let want_h: Vec<u16> = edges.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        for (i, (g, w)) in h.iter().zip(&want_h).enumerate() {
            let nan = f16::from_bits(*w).is_nan() && f16::from_bits(*g).is_nan();
            assert!(g == w || nan, "f16 of {} ({path}): got {g:#x}, want {w:#x}", edges[i]);
        }
        let b: Vec<u16> = x.to_dtype(DType::BF16).to_vec_as::<bf16>().iter().map(|v| v.to_bits()).collect();
        let want_b16: Vec<u16> = edges.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        for (i, (g, w)) in b.iter().zip(&want_b16).enumerate() {
            let nan = bf16::from_bits(*w).is_nan() && bf16::from_bits(*g).is_nan();
            assert!(g == w || nan, "bf16 of {} ({path}): got {g:#x}, want {w:#x}", edges[i]);
        }
        // Integers to floats and back; i32 <-> u32 keep their bits; bools are 0 or 1.
        let ints = vec![i32::MIN, -1, 0, 1, 16_777_217, i32::MAX];
        let i = Tensor::from_vec_on(ints.clone(), [6], &dev);
        let f: Vec<f32> = ints.iter().map(|&v| v as f32).collect();
        assert_eq!(i.to_dtype(DType::F32).to_vec(), f, "{path}");
        assert_eq!(i.to_dtype(DType::U32).to_vec_as::<u32>(), ints.iter().map(|&v| v as u32).collect::<Vec<_>>());
        let m = Tensor::from_vec_on(vec![true, false, true], [3], &dev);
        assert_eq!(m.to_dtype(DType::F16).to_vec_as::<f16>(), vec![f16::ONE, f16::ZERO, f16::ONE]);
        assert_eq!(m.to_dtype(DType::I32).to_vec_as::<i32>(), vec![1, 0, 1]);
        check(&x.to_dtype(DType::BF16).to_dtype(DType::F16), 0.0, 0.0, "bf16 to f16");
    }
}

/// Every f16 rounding case, as `half` rounds (to nearest, ties to even), where a kernel's f32 result is rounded as it
/// is stored: sums of f16 values exactly halfway between neighbouring f16 values and just either side, in every
/// normal binade that allows it, both signs; products that land halfway between subnormals; the overflow edge.
/// Stored whole words at a time (a multiple of 4 elements) and element by element (an odd tail).
#[test]
fn f16_results_round_to_nearest_even_as_they_are_stored() {
    let h = |v: f32| f16::from_f32(v);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // lo + ulp/2 (a tie), lo + ulp/2 (1 +- 2^-10): each operand an f16, the sum exact in f32.
    for bits in (0x0800u16..0x7bff).step_by(3) {
        let lo = f16::from_bits(bits);
        let half_ulp = (f16::from_bits(bits + 1).to_f32() - lo.to_f32()) / 2.0;
        for d in [half_ulp, half_ulp * (1.0 + 1.0 / 1024.0), half_ulp * (1.0 - 1.0 / 2048.0)] {
            for sign in [1.0, -1.0] {
                a.push(h(sign * lo.to_f32()));
                b.push(h(sign * d));
            }
        }
    }
    // m 2^-12 * 2^-13: halfway between subnormals for odd m.
    for m in 1..2048 {
        a.push(h(m as f32 / 4096.0));
        b.push(h(1.0 / 8192.0));
    }
    a.extend([h(65504.0), h(65504.0), h(-65504.0), h(f32::NAN)]);
    b.extend([h(16.0), h(15.0), h(-16.0), h(1.0)]);
    let sums = a.len() - 2047 - 4;
    let want: Vec<f16> = (0..a.len())
        .map(|i| {
            let (x, y) = (a[i].to_f32(), b[i].to_f32());
            h(if i < sums || i >= a.len() - 4 { x + y } else { x * y })
        })
        .collect();
    for n in [a.len() - a.len() % 4 - 4, a.len()] {
        for (dev, path) in f16_paths() {
            let x = Tensor::from_vec_on(a[..n].to_vec(), [n], &dev);
            let y = Tensor::from_vec_on(b[..n].to_vec(), [n], &dev);
            let take = |lo: usize, hi: usize| lo.min(n)..hi.min(n);
            let add = (&x + &y).to_vec_as::<f16>();
            let mul = (&x * &y).to_vec_as::<f16>();
            for i in take(0, sums).chain(take(a.len() - 4, a.len())) {
                let ok = add[i].to_bits() == want[i].to_bits() || (add[i].is_nan() && want[i].is_nan());
                assert!(
                    ok,
                    "{:e} + {:e} to f16 ({path}, {n}): got {:#x}, want {:#x}",
                    a[i],
                    b[i],
                    add[i].to_bits(),
                    want[i].to_bits()
                );
            }
            for i in take(sums, a.len() - 4) {
                assert_eq!(mul[i].to_bits(), want[i].to_bits(), "{:e} * {:e} to f16 ({path}, {n})", a[i], b[i]);
            }
        }
    }
}

#[test]
fn comparisons_with_nan_are_false_except_ne() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![f32::NAN, 1.0, f32::NAN, 2.0, -0.0], [5], &dev);
        let b = Tensor::from_vec_on(vec![1.0, f32::NAN, f32::NAN, 2.0, 0.0], [5], &dev);
        let f = [false, false, false];
        assert_eq!(a.lt(&b).to_vec_as::<bool>(), [&f[..], &[false, false]].concat());
        assert_eq!(a.le(&b).to_vec_as::<bool>(), [&f[..], &[true, true]].concat());
        assert_eq!(a.gt(&b).to_vec_as::<bool>(), [&f[..], &[false, false]].concat());
        assert_eq!(a.ge(&b).to_vec_as::<bool>(), [&f[..], &[true, true]].concat());
        assert_eq!(a.eq(&b).to_vec_as::<bool>(), [&f[..], &[true, true]].concat());
        assert_eq!(a.ne(&b).to_vec_as::<bool>(), vec![true, true, true, false, false]);
        assert_eq!(a.ge(0.5).to_vec_as::<bool>(), vec![false, true, false, true, false]);
        let ints = Tensor::from_vec_on(vec![-1, 0, 1], [3], &dev);
        assert_eq!(ints.lt(0i32).to_vec_as::<bool>(), vec![true, false, false]);
        // Bool logic.
        let p = Tensor::from_vec_on(vec![true, true, false, false], [4], &dev);
        let q = Tensor::from_vec_on(vec![true, false, true, false], [4], &dev);
        assert_eq!((&p & &q).to_vec_as::<bool>(), vec![true, false, false, false]);
        assert_eq!((&p | &q).to_vec_as::<bool>(), vec![true, true, true, false]);
        assert_eq!((&p ^ &q).to_vec_as::<bool>(), vec![false, true, true, false]);
        assert_eq!((!&p).to_vec_as::<bool>(), vec![false, false, true, true]);
    }
}

#[test]
fn where_cond_broadcasts_all_three_and_fuses() {
    for dev in devices() {
        let mut rng = Rng::new(23);
        let x = random(&dev, &mut rng, DType::F32, &[64, 33]);
        let y = random(&dev, &mut rng, DType::F32, &[33]);
        let mask = x.gt(&y);
        let before = dev.stats();
        let z = mask.where_cond(&x, &y.unsqueeze(0) * 2.0);
        check(&z, 0.0, 0.0, "where_cond, broadcast");
        assert_eq!(dev.stats().dispatches - before.dispatches, 1, "compare, where and math fuse into one kernel");
        let c = Tensor::from_vec_on(vec![true, false], [2, 1], &dev);
        let w = c.where_cond(1.5, Tensor::from_vec_on(vec![f16::from_f32(3.0); 3], [3], &dev));
        assert_eq!(w.dtype(), DType::F16);
        assert_eq!(w.shape(), &[2, 3]);
        check(&w, 0.0, 0.0, "where_cond with a scalar branch");
        let e = x.try_where_cond(&x, &y).unwrap_err().to_string();
        assert!(e.contains("where_cond") && e.contains("f32") && e.contains("bool"), "{e}");
    }
}

#[test]
fn argmax_takes_the_first_on_ties_and_the_first_nan() {
    for dev in devices() {
        let x = Tensor::from_vec_on(
            vec![1.0, 3.0, 3.0, 0.0, f32::NAN, 5.0, f32::NAN, 1.0, -1.0, -1.0, 2.0, -1.0],
            [3, 4],
            &dev,
        );
        assert_eq!(x.argmax(-1).to_vec_as::<i32>(), vec![1, 0, 2]);
        assert_eq!(x.argmin(1).to_vec_as::<i32>(), vec![3, 0, 0]);
        assert_eq!(x.argmax(0).to_vec_as::<i32>(), vec![1, 1, 1, 1]);
        assert_eq!(x.argmax_keepdim(0).shape(), &[1, 4]);
        assert_eq!(x.argmin(0).dtype(), DType::I32);
        let e = Tensor::zeros_on([2, 0], &dev).try_argmax(1).unwrap_err().to_string();
        assert!(e.contains("argmax") && e.contains("[2, 0]"), "{e}");
        // Random rows and columns, long axes, integers.
        let mut rng = Rng::new(24);
        for (dt, shape, dim) in [
            (DType::F32, vec![33, 1000], 1usize),
            (DType::F32, vec![1000, 33], 0),
            (DType::I32, vec![7, 5000], 1),
            (DType::F16, vec![65, 70], 1),
            (DType::U32, vec![3, 3, 3], 1),
            (DType::Bool, vec![40, 9], 1),
        ] {
            let x = random(&dev, &mut rng, dt, &shape);
            check(&x.argmax(dim), 0.0, 0.0, &format!("argmax {dt} {shape:?} {dim}"));
            check(&x.argmin(dim), 0.0, 0.0, &format!("argmin {dt} {shape:?} {dim}"));
        }
        let before = dev.stats();
        random(&dev, &mut rng, DType::F32, &[64, 512]).argmax(-1).realize().unwrap();
        // One rows kernel (the maximum, then the least index holding it) and the copy that drops the axis: rows
        // kernels do not yet store output-shaped views of their folds themselves.
        assert_eq!(dev.stats().dispatches - before.dispatches, 2, "argmax over rows");
    }
}

#[test]
fn reductions_on_every_dtype() {
    for (dev, path) in f16_paths() {
        let mut rng = Rng::new(25);
        let m = Tensor::from_vec_on(vec![true, false, true, true], [2, 2], &dev);
        assert_eq!(m.sum(1).dtype(), DType::I32);
        assert_eq!(m.sum(1).to_vec_as::<i32>(), vec![1, 2]);
        let big = Tensor::from_vec_on(vec![i32::MAX, 1], [2], &dev);
        assert_eq!(big.sum_all().to_scalar_as::<i32>(), i32::MIN, "i32 sums wrap");
        let ints = Tensor::from_vec_on(vec![1, 2, 4], [3], &dev);
        assert_eq!(ints.mean_all().dtype(), DType::F32);
        assert!((ints.mean_all().to_scalar() - 7.0 / 3.0).abs() < 1e-6);
        for dt in DType::ALL {
            for (shape, dim) in [(vec![5, 300], 1usize), (vec![300, 5], 0), (vec![4, 3, 70_000], 2), (vec![9], 0)] {
                let x = random(&dev, &mut rng, dt, &shape);
                let (rel, abs) = tol(dt);
                let what = |op: &str| format!("{op} of {dt} {shape:?} along {dim} ({path})");
                check(&x.max(dim), 0.0, 0.0, &what("max"));
                check(&x.min(dim), 0.0, 0.0, &what("min"));
                if dt != DType::Bool {
                    // Small integers, so the f32 reference's sum is exact.
                    let small = if dt.is_int() { &x % 64u32 } else { x.clone() };
                    check(&small.sum(dim), rel.max(1e-5), abs.max(1e-3), &what("sum"));
                    check(&small.mean(dim), rel.max(1e-5), abs.max(1e-3), &what("mean"));
                } else {
                    check(&x.sum(dim), 0.0, 0.0, &what("sum"));
                }
            }
        }
        // f16 sums accumulate in f32: 4096 ones sum to 4096, past f16's 2048 where 1 + 2048 rounds away.
        let ones = Tensor::from_vec_on(vec![f16::ONE; 4096], [4096], &dev);
        assert_eq!(ones.sum_all().to_scalar_as::<f16>(), f16::from_f32(4096.0), "{path}");
        check(&random(&dev, &mut rng, DType::BF16, &[64, 64]).softmax(-1), 1.6e-2, 1e-3, "bf16 softmax");
        check(&random(&dev, &mut rng, DType::F16, &[64, 64]).logsumexp(-1), 2e-3, 1e-3, "f16 logsumexp");
    }
}

#[test]
fn half_matmul_accumulates_in_f32() {
    for (dev, path) in f16_paths() {
        let mut rng = Rng::new(26);
        for dt in [DType::F16, DType::BF16] {
            for (m, k, n) in [(33, 70, 65), (1, 300, 40), (50, 200, 1), (128, 128, 128)] {
                let a = random(&dev, &mut rng, dt, &[m, k]);
                let b = random(&dev, &mut rng, dt, &[k, n]);
                let y = a.matmul(&b);
                assert_eq!(y.dtype(), dt);
                // Sums of up to 300 products of values below 8: rounding to the type dominates.
                let (rel, _) = tol(dt);
                check(&y, rel, 0.5, &format!("{dt} matmul {m}x{k}x{n} ({path})"));
                check(&(a.matmul(&b) * 2.0).relu(), rel, 1.0, &format!("{dt} matmul epilogue ({path})"));
            }
        }
    }
}

#[test]
fn a_half_product_stores_whole_words_beside_its_other_outputs() {
    // Small integers: every product and sum is exact, so each output compares exactly, the mask's zeros included.
    for (dev, path) in f16_paths() {
        let mut rng = Rng::new(27);
        for dt in [DType::F16, DType::BF16] {
            // n = 68: every row starts on a word, 4 columns a thread fill whole words; n = 67 and 130: rows that do
            // not, and the last columns a thread holds past n, stored element by element.
            // (1, 700, 33, 10): a thin product, whose outputs go through the same `epi` one element at a time.
            for (batch, m, k, n) in [(1, 70, 33, 68), (3, 33, 20, 67), (2, 129, 17, 130), (1, 700, 33, 10)] {
                let ints =
                    |len: usize, rng: &mut Rng| -> Vec<f32> { (0..len).map(|_| rng.below(9) as f32 - 4.0).collect() };
                let a = Tensor::from_vec_on(ints(batch * m * k, &mut rng), [batch, m, k], &dev).to_dtype(dt);
                let b = Tensor::from_vec_on(ints(batch * k * n, &mut rng), [batch, k, n], &dev).to_dtype(dt);
                lazor::realize(&[&a, &b]).unwrap();
                let y = a.matmul(&b);
                let mask = y.gt(0.0);
                let wide = (&y * 0.5).to_dtype(DType::F32);
                let want = lazor::reference::eval_lanes(&[&y, &mask, &wide]);
                let ran = common::kernels(&dev, || lazor::realize(&[&y, &mask, &wide]).unwrap());
                let what = format!("{dt} [{batch}, {m}, {k}] x [{batch}, {k}, {n}] ({path})");
                assert_eq!(ran, 1, "{what}: the product and its three outputs in one kernel");
                for (t, want) in [&y, &mask, &wide].into_iter().zip(&want) {
                    let got = lazor::reference::device_lanes(t);
                    assert_eq!(&got, want, "{what}: the {} output", t.dtype());
                }
            }
        }
    }
}

#[test]
fn narrow_types_take_their_size_in_memory() {
    let dev = Device::cpu();
    for (dt, bytes) in [(DType::Bool, 4096u64), (DType::F16, 8192), (DType::BF16, 8192), (DType::I32, 16384)] {
        let before = dev.stats().live_buffer_bytes;
        let t = Tensor::zeros_dtype([4096], dt).to_device(&dev);
        let y = t.maximum(&Tensor::ones_dtype([4096], dt).to_device(&dev));
        y.realize().unwrap();
        assert_eq!(dev.stats().live_buffer_bytes - before, 2 * bytes, "{dt}: input and output");
        assert_eq!(dt.size_in_bytes() as u64 * 4096, bytes);
    }
}

#[test]
fn reads_name_the_dtype_and_the_call_to_use() {
    let t = Tensor::from_vec_on(vec![1i32, 2], [2], &Device::cpu());
    let e = t.try_to_vec().unwrap_err().to_string();
    assert!(e.contains("i32") && e.contains("to_vec_as::<i32>()"), "{e}");
    let e = t.try_to_vec_as::<u32>().unwrap_err().to_string();
    assert!(e.contains("i32") && e.contains("u32"), "{e}");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.to_vec()));
    assert!(r.is_err());
    assert_eq!(t.sum_all().to_scalar_as::<i32>(), 3);
}

#[test]
fn a_narrow_output_past_65535_workgroups() {
    for dev in gpu_devices() {
        // Read transposed, with an odd side: one element per thread, so bytes are stored by atomic updates of
        // their words, from more than 65535 workgroups.
        let side = 4099;
        let x = Tensor::arange_on(side * side, &dev).reshape([side, side]).t();
        let m = (&x % 3i32).eq(1i32);
        let got = m.to_vec_as::<bool>();
        assert_eq!(got.len(), side * side);
        let bad = (0..side * side).find(|&i| got[i] != (((i % side) * side + i / side) % 3 == 1));
        assert_eq!(bad, None, "first wrong element");
    }
}

/// Large elementwise kernels of 16-bit elements compute two vectors per thread, both before storing either: sizes
/// whose vector count is odd (the last thread's second vector clamped and not stored) or not whole, a broadcast
/// (coordinates per vector), two outputs of one kernel and a bool output, against the reference, in one dispatch
/// each.
#[test]
fn half_kernels_of_two_vectors_per_thread_match_the_reference() {
    let mut rng = Rng::new(83);
    for (dev, path) in f16_paths() {
        for dt in [DType::BF16, DType::F16] {
            // Rounded once per op on the way, to terms up to 80 that may cancel: an absolute tolerance of that size.
            let (rel, _) = tol(dt);
            let abs = 80.0 * rel;
            for n in [(1 << 20) + 4, (1 << 20) + 3, (1 << 20) + 8] {
                let (a, b, c) = (
                    random(&dev, &mut rng, dt, &[n]),
                    random(&dev, &mut rng, dt, &[n]),
                    random(&dev, &mut rng, dt, &[n]),
                );
                lazor::realize(&[&a, &b, &c]).unwrap();
                let y = ((&a + &b) * 5.0 - &c) / 2.0;
                let before = dev.stats().dispatches;
                check(&y, rel, abs, &format!("{path}: chain3 of {n} {dt}"));
                assert_eq!(dev.stats().dispatches - before, 1, "{path}: one kernel");
            }
            // Two outputs of one paired kernel, realized together.
            let n = (1 << 20) + 4;
            let (a, b) = (random(&dev, &mut rng, dt, &[n]), random(&dev, &mut rng, dt, &[n]));
            lazor::realize(&[&a, &b]).unwrap();
            let (sum, prod) = (&a + &b, &a * &b);
            let want = lazor::reference::eval(&[&sum, &prod]);
            let before = dev.stats().dispatches;
            lazor::realize(&[&sum, &prod]).unwrap();
            assert_eq!(dev.stats().dispatches - before, 1, "{path}: both outputs from one kernel");
            let got = [sum.to_dtype(DType::F32).to_vec(), prod.to_dtype(DType::F32).to_vec()];
            assert_close(&got[0], &want[0], rel, abs, &format!("{path}: a + b of two outputs, {dt}"));
            assert_close(&got[1], &want[1], rel, abs, &format!("{path}: a * b of two outputs, {dt}"));
            let x = random(&dev, &mut rng, dt, &[1024, 1028]);
            let bias = random(&dev, &mut rng, dt, &[1028]);
            lazor::realize(&[&x, &bias]).unwrap();
            let s = &x + &bias;
            let m = s.gt(0.0);
            let both = check(&s.relu(), rel, abs, &format!("{path}: relu(x + bias), {dt}"));
            assert_eq!(both.len(), 1024 * 1028);
            check(&m, 0.0, 0.0, &format!("{path}: x + bias > 0, {dt}"));
        }
    }
}
