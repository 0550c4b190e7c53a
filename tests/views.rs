//! Views as index math: every view op against the reference, fused into consumers, with counts of what ran.

mod common;

use common::{assert_close, check, devices, Rng};
use lazor::{Device, Error, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn rand(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec_on(rng.vec(n, -2.0, 2.0), shape, dev)
}

/// A realized random tensor: its value sits in a buffer, as most inputs do.
fn stored(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let t = rand(dev, rng, shape);
    t.realize().unwrap();
    t
}

fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

/// Dispatches, uploads, downloads and buffers created by `f`.
fn counts(dev: &Device, f: impl FnOnce()) -> (u64, u64, u64, u64) {
    let s = dev.stats();
    f();
    let e = dev.stats();
    (
        e.dispatches - s.dispatches,
        e.bytes_uploaded - s.bytes_uploaded,
        e.bytes_downloaded - s.bytes_downloaded,
        e.buffers_allocated - s.buffers_allocated,
    )
}

#[test]
fn each_view_op_matches_the_reference_on_ranks_0_to_5() {
    for dev in devices() {
        let mut rng = Rng::new(1);
        let shapes: [&[usize]; 6] = [&[], &[7], &[3, 5], &[2, 1, 3], &[2, 3, 1, 5], &[1, 2, 3, 2, 3]];
        for shape in shapes {
            let x = stored(&dev, &mut rng, shape);
            let e = &x * 1.5 + 0.25; // the same views over an unrealized expression
            for src in [&x, &e] {
                let n = shape.len();
                let what = |op: &str| format!("{op} of {shape:?}");
                check(&src.reshape([src.numel()]), 0.0, 1e-6, &what("reshape"));
                check(&src.flatten(), 0.0, 1e-6, &what("flatten"));
                check(&src.unsqueeze(0), 0.0, 1e-6, &what("unsqueeze(0)"));
                check(&src.unsqueeze(-1), 0.0, 1e-6, &what("unsqueeze(-1)"));
                if n == 0 {
                    continue;
                }
                let rev: Vec<usize> = (0..n).rev().collect();
                check(&src.permute(&rev), 0.0, 1e-6, &what("permute"));
                check(&src.transpose(0, -1), 0.0, 1e-6, &what("transpose"));
                let last = shape[n - 1];
                check(&src.narrow(-1, last / 2, last - last / 2), 0.0, 1e-6, &what("narrow"));
                check(&src.narrow(0, 0, 0), 0.0, 1e-6, &what("empty narrow"));
                let mut big = vec![3];
                big.extend(shape.iter().map(|&d| if d == 1 { 4 } else { d }));
                check(&src.expand(big.as_slice()), 0.0, 1e-6, &what("expand"));
                if let Some(one) = shape.iter().position(|&d| d == 1) {
                    check(&src.squeeze(one), 0.0, 1e-6, &what("squeeze"));
                }
                if n >= 2 {
                    check(&(src.t() * 2.0), 0.0, 1e-6, &what("t"));
                    check(&src.t().reshape([src.numel()]), 0.0, 1e-6, &what("reshape of t"));
                }
                check(&Tensor::cat(&[src, &(src + 1.0), src], -1), 0.0, 1e-6, &what("cat"));
                check(&Tensor::stack(&[src, &src.exp()], 0), 0.0, 1e-5, &what("stack"));
                check(&Tensor::stack(&[src, &src.exp()], -1), 0.0, 1e-5, &what("stack(-1)"));
            }
        }
    }
}

#[test]
fn transposed_inputs_fuse_into_one_dispatch_moving_only_their_bytes() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        let (a, b) = (stored(&dev, &mut rng, &[33, 47]), stored(&dev, &mut rng, &[47, 33]));
        let y = (a.t() + &b).relu();
        let (k, up, down, _) = counts(&dev, || drop(check(&y, 0.0, 0.0, "(a.t() + b).relu()")));
        // The reference reads a and b back in one submit first, then y runs: one kernel, one result read.
        assert_eq!(k, 1, "one dispatch");
        assert_eq!(up, 0);
        // On a GPU: a and b for the reference, y once; on the CPU nothing crosses a bus.
        let moved = if dev.is_cpu() { 0 } else { (2 * 33 * 47 + 33 * 47) * 4 };
        assert_eq!(down, moved, "a and b for the reference, y once");
        // A narrowed, expanded view reads the source's buffer directly.
        let c = stored(&dev, &mut rng, &[5, 3]);
        let v = c.narrow(0, 1, 2).expand([4, 2, 3]);
        let (k, up, _, allocated) = counts(&dev, || drop(v.to_vec()));
        assert_eq!((k, up), (1, 0));
        assert!(allocated <= 3, "the output, parameters and staging, no copy of c: {allocated}");
        // A fresh expression: `v` is realized, a buffer the reference would read back.
        check(&c.narrow(0, 1, 2).expand([4, 2, 3]), 0.0, 0.0, "narrow then expand");
    }
}

#[test]
fn views_of_unrealized_expressions_are_inlined_not_stored() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        let (a, b, c) =
            (stored(&dev, &mut rng, &[8, 6]), stored(&dev, &mut rng, &[8, 6]), stored(&dev, &mut rng, &[6, 8]));
        let y = ((&a * &b).exp().t() + &c).narrow(1, 2, 5) * 3.0;
        let (k, ..) = counts(&dev, || drop(y.to_vec()));
        assert_eq!(k, 1, "the product, the transpose, the narrow and the sum are one kernel");
        check(&(((&a * &b).exp().t() + &c).narrow(1, 2, 5) * 3.0), 1e-6, 1e-6, "view of an expression");
        // A realized view gets its own contiguous buffer, read like any tensor.
        let v = a.t();
        v.realize().unwrap();
        assert!(v.is_realized());
        let (k, ..) = counts(&dev, || drop(check(&(&v + 1.0), 0.0, 0.0, "realized view")));
        assert_eq!(k, 1);
    }
}

#[test]
fn free_reshapes_add_no_kernel_and_the_others_add_exactly_one() {
    for dev in devices() {
        let mut rng = Rng::new(4);
        let a = stored(&dev, &mut rng, &[4, 6]);
        let b = stored(&dev, &mut rng, &[4, 6]);
        let bias = stored(&dev, &mut rng, &[6]);
        let dispatches = |t: Tensor, what: &str| {
            let (k, ..) = counts(&dev, || drop(check(&t, 1e-6, 1e-6, what)));
            k
        };
        // Free: contiguous source, a split of a transposed axis, an expression of same-shaped inputs.
        assert_eq!(dispatches(a.reshape([2, 12]) + 1.0, "reshape of a buffer"), 1);
        assert_eq!(dispatches(a.t().reshape([3, 2, 4]) + 1.0, "split of a transposed axis"), 1);
        assert_eq!(dispatches((&a + &b).reshape([24]) + 1.0, "merge over an expression"), 1);
        assert_eq!(dispatches(a.narrow(0, 1, 2).reshape([12]) + 1.0, "merge of a narrowed buffer"), 1);
        // Not free: merging transposed axes, merging an axis along which an operand is broadcast.
        assert_eq!(dispatches(a.t().reshape([24]) + 1.0, "merge of transposed axes"), 2);
        assert_eq!(dispatches((&a + &bias).reshape([24]) + 1.0, "merge over a broadcast"), 2);
        // contiguous() gives a realized value its own row-major buffer; read inside a kernel it costs nothing more.
        assert_eq!(dispatches(a.t().contiguous() + 1.0, "contiguous, read inline"), 1);
        let c = a.t().contiguous();
        assert_eq!(dispatches(c.clone(), "contiguous, realized"), 1);
        assert_eq!(dispatches(c.reshape([24]) + 1.0, "merge of its axes"), 1, "now a free reshape");
        assert_eq!(dispatches(a.contiguous() + 1.0, "contiguous of contiguous"), 1);
        assert!(a.is_contiguous() && a.reshape([24]).is_contiguous() && !a.t().is_contiguous());
        assert!(a.t().contiguous().is_contiguous());
    }
}

#[test]
fn cat_and_stack_pick_the_input_per_element_in_one_kernel() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let a = stored(&dev, &mut rng, &[3, 4]);
        let b = stored(&dev, &mut rng, &[2, 4]);
        let c = stored(&dev, &mut rng, &[3, 5]);
        for (t, what) in [
            (Tensor::cat(&[&a, &b], 0) * 2.0, "cat rows"),
            (Tensor::cat(&[&a, &c.exp(), &a], 1) + 1.0, "cat columns of an expression"),
            (Tensor::cat(&[&a, &b], 0).t(), "transposed cat"),
            (Tensor::cat(&[&a, &b], 0).narrow(0, 2, 2), "narrowed cat across the seam"),
            (Tensor::cat(&[&a, &b], 0).narrow(0, 3, 2), "narrowed cat inside one part"),
            (Tensor::cat(&[&a.narrow(1, 0, 1), &b.narrow(1, 3, 1)], 0).expand([5, 7]), "expanded cat"),
            (Tensor::stack(&[&a, &a.t().t(), &(&a * 3.0)], 1), "stack"),
            (Tensor::cat(&[&Tensor::cat(&[&a, &b], 0), &a], 0) - 1.0, "nested cat"),
        ] {
            let (k, up, ..) = counts(&dev, || drop(check(&t, 1e-6, 1e-6, what)));
            assert_eq!((k, up), (1, 0), "{what}: one kernel, nothing copied first");
        }
        // Many parts: a cat of stored cats, every part still read in place.
        let parts: Vec<Tensor> = (0..40).map(|i| Tensor::full_on([2], i as f32, &dev)).collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let got = Tensor::cat(&refs, 0).to_vec();
        assert_eq!(got, (0..80).map(|i| (i / 2) as f32).collect::<Vec<_>>());
        // Empty parts are skipped; an empty cat is empty.
        let e = Tensor::zeros_on([0, 4], &dev);
        check(&Tensor::cat(&[&e, &a, &e], 0), 0.0, 0.0, "cat with empty parts");
        assert_eq!(Tensor::cat(&[&e, &e], 0).to_vec(), Vec::<f32>::new());
    }
}

#[test]
fn the_same_view_pattern_at_another_size_or_offset_compiles_nothing() {
    for dev in devices() {
        let mut rng = Rng::new(6);
        let run = |rows: usize, cols: usize, start: usize, rng: &mut Rng| {
            let a = stored(&dev, rng, &[rows, cols]);
            let b = stored(&dev, rng, &[cols - start, rows]);
            check(&(a.narrow(1, start, cols - start).t() + &b), 0.0, 0.0, "narrow then t");
            let c = stored(&dev, rng, &[rows, cols]);
            check(&(Tensor::cat(&[&a, &c], 0) * 2.0), 0.0, 0.0, "cat");
        };
        run(5, 7, 1, &mut rng);
        let compiled = dev.stats().pipelines_compiled;
        run(9, 13, 4, &mut rng);
        run(31, 3, 2, &mut rng);
        assert_eq!(dev.stats().pipelines_compiled, compiled, "new sizes and offsets reuse the pipelines");
    }
}

#[test]
fn big_views_keep_vec4_and_stay_correct() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        // Past the vectorization threshold: transposed (gathered), narrowed (aligned and not), broadcast (splat).
        let (a, b) = (stored(&dev, &mut rng, &[256, 512]), stored(&dev, &mut rng, &[512, 256]));
        let col = stored(&dev, &mut rng, &[512, 1]);
        check(&(a.t() + &b), 0.0, 0.0, "transpose");
        check(&(a.t() * &col + &b), 1e-6, 1e-6, "transpose times a column");
        check(&(a.narrow(1, 4, 256) + &b.t().narrow(1, 4, 256)), 0.0, 0.0, "aligned narrow");
        // One input read two ways in one vectorized kernel: splat down the columns, 16-byte loads along the rows.
        let v = stored(&dev, &mut rng, &[512]);
        check(&(v.unsqueeze(1).expand([512, 512]) - v.expand([512, 512])), 0.0, 0.0, "splat and vector reads");
        check(&(a.narrow(1, 3, 256) + &b.t().narrow(1, 5, 256)), 0.0, 0.0, "unaligned narrow");
        check(&(Tensor::cat(&[&a, &b.t()], 1) * 2.0), 0.0, 0.0, "cat along the innermost axis");
        check(&(Tensor::cat(&[&a.narrow(1, 0, 3), &b.t().narrow(1, 0, 509)], 1) * 2.0), 0.0, 0.0, "unaligned cat");
        // Tiled: batched, sizes not multiples of the tile, two transposed operands and a broadcast one.
        let p = stored(&dev, &mut rng, &[3, 100, 333]);
        let q = stored(&dev, &mut rng, &[3, 333, 100]);
        let r = stored(&dev, &mut rng, &[333, 100]);
        check(&(p.transpose(-2, -1) * &q + &r.t().t() - &p.permute([0, 2, 1]).exp()), 1e-5, 1e-5, "batched tiles");
        let x = stored(&dev, &mut rng, &[1 << 18]);
        let y = stored(&dev, &mut rng, &[1 << 18]);
        check(&(Tensor::cat(&[&x, &y], 0) * 2.0), 0.0, 0.0, "1-D cat");
        check(&(x.narrow(0, 8, 1000) + 1.0), 0.0, 0.0, "1-D narrow");
    }
}

#[test]
fn strided_kernels_past_65535_workgroups_fold_into_two_dimensions() {
    for dev in devices() {
        let rows = 65_535 * 256 / 7 + 9; // 7 columns: scalar kernel (odd innermost), more than 65535 workgroups
        let n = rows * 7;
        let a = Tensor::from_vec_on((0..n).map(|i| (i % 1009) as f32).collect(), [7, rows], &dev);
        let got = (a.t() + 1.0).to_vec();
        for r in (0..rows).step_by(997).chain([rows - 1]) {
            for c in 0..7 {
                assert_eq!(got[r * 7 + c], ((c * rows + r) % 1009) as f32 + 1.0, "element ({r}, {c})");
            }
        }
    }
}

#[test]
fn random_chains_of_views_match_the_reference_fused_and_unfused() {
    for dev in devices() {
        for seed in 0..120u64 {
            let mut rng = Rng::new(seed);
            let (expr, log) = random_chain(&dev, &mut rng);
            dev.set_fusion(seed % 2 == 0);
            let want = lazor::reference::eval(&[&expr]).pop().unwrap();
            let got = expr.to_vec();
            assert_close(&got, &want, 1e-5, 1e-5, &format!("seed {seed}: {log}"));
        }
    }
}

/// A random chain of 2 to 6 views with elementwise ops between them; returns it and its description.
fn random_chain(dev: &Device, rng: &mut Rng) -> (Tensor, String) {
    let ndim = 1 + rng.below(4);
    let shape: Vec<usize> = (0..ndim).map(|_| 1 + rng.below(6)).collect();
    let mut x = if rng.below(2) == 0 { stored(dev, rng, &shape) } else { rand(dev, rng, &shape).exp() };
    let mut log = format!("{shape:?}");
    for _ in 0..2 + rng.below(5) {
        let s = x.shape().to_vec();
        let n = s.len();
        let step = rng.below(10);
        let (next, what) = match step {
            0 => {
                let mut dims: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    dims.swap(i, rng.below(i + 1));
                }
                (x.permute(&dims), format!("permute{dims:?}"))
            }
            1 if n >= 2 => (x.t(), "t".to_string()),
            2 if n > 0 => {
                let d = rng.below(n);
                let start = rng.below(s[d] + 1);
                let len = rng.below(s[d] - start + 1);
                (x.narrow(d as i32 - n as i32, start, len), format!("narrow({d}, {start}, {len})"))
            }
            3 => {
                let mut dims = s.clone();
                let total: usize = dims.iter().product();
                if total > 1 {
                    // Split the element count into a random factorization.
                    let mut f = Vec::new();
                    let mut rest = total;
                    let mut p = 2;
                    while rest > 1 {
                        if rest % p == 0 {
                            f.push(p);
                            rest /= p;
                        } else {
                            p += 1;
                        }
                    }
                    dims.clear();
                    for v in f {
                        if !dims.is_empty() && rng.below(2) == 0 {
                            *dims.last_mut().unwrap() *= v;
                        } else {
                            dims.push(v);
                        }
                    }
                }
                (x.reshape(dims.as_slice()), format!("reshape{dims:?}"))
            }
            4 if n < 5 => {
                let d = rng.below(n + 1);
                (x.unsqueeze(d), format!("unsqueeze({d})"))
            }
            5 => {
                let mut to = vec![1 + rng.below(3)];
                to.extend(s.iter().map(|&d| if d == 1 { 1 + rng.below(3) } else { d }));
                (x.expand(to.as_slice()), format!("expand{to:?}"))
            }
            6 if n > 0 => {
                let d = rng.below(n);
                let other = rand(dev, rng, &s) + 0.5;
                (Tensor::cat(&[&x, &other], d), format!("cat({d})"))
            }
            7 => (x.sigmoid() * 2.0 - 0.5, "sigmoid".to_string()),
            8 if n > 0 => {
                let row = rand(dev, rng, &s[n - 1..]);
                (&x + &row, "+ row".to_string())
            }
            9 if s.contains(&1) => {
                let d = s.iter().position(|&v| v == 1).unwrap();
                (x.squeeze(d), format!("squeeze({d})"))
            }
            _ => (&x * 1.25, "* 1.25".to_string()),
        };
        if next.numel() > 20_000 {
            continue;
        }
        x = next;
        log.push_str(" . ");
        log.push_str(&what);
    }
    (x, log)
}

/// A bad call as a `try_` twin and as the panicking method, with the op and argument its message must name.
type Case<'a> = (Box<dyn Fn() -> Result<Tensor, Error> + 'a>, Box<dyn Fn() + 'a>, &'static str, &'static str);

#[test]
fn bad_arguments_name_the_op_the_argument_and_the_shape() {
    for dev in devices() {
        let a = Tensor::zeros_on([2, 3], &dev);
        let cases: Vec<Case> = vec![
            (Box::new(|| a.try_reshape([4, 2])), Box::new(|| drop(a.reshape([4, 2]))), "reshape", "[4, 2]"),
            (Box::new(|| a.try_permute([0, 0])), Box::new(|| drop(a.permute([0, 0]))), "permute", "[0, 0]"),
            (Box::new(|| a.try_permute([0])), Box::new(|| drop(a.permute([0]))), "permute", "[0]"),
            (Box::new(|| a.try_transpose(0, 2)), Box::new(|| drop(a.transpose(0, 2))), "transpose", "2"),
            (Box::new(|| a.try_transpose(-3, 0)), Box::new(|| drop(a.transpose(-3, 0))), "transpose", "-3"),
            (Box::new(|| a.try_narrow(1, 2, 2)), Box::new(|| drop(a.narrow(1, 2, 2))), "narrow", "len 2"),
            (Box::new(|| a.try_narrow(5, 0, 1)), Box::new(|| drop(a.narrow(5, 0, 1))), "narrow", "5"),
            (Box::new(|| a.try_squeeze(0)), Box::new(|| drop(a.squeeze(0))), "squeeze", "0"),
            (Box::new(|| a.try_unsqueeze(4)), Box::new(|| drop(a.unsqueeze(4))), "unsqueeze", "4"),
            (Box::new(|| a.try_expand([2, 4])), Box::new(|| drop(a.expand([2, 4]))), "expand", "[2, 4]"),
            (Box::new(|| a.try_expand([3])), Box::new(|| drop(a.expand([3]))), "expand", "[3]"),
            (
                Box::new(|| a.narrow(0, 0, 1).squeeze(0).try_t()),
                Box::new(|| drop(a.narrow(0, 0, 1).squeeze(0).t())),
                "t",
                "2 axes",
            ),
            (
                Box::new(|| Tensor::try_cat(&[&a, &Tensor::zeros_on([2, 4], &dev)], 0)),
                Box::new(|| drop(Tensor::cat(&[&a, &Tensor::zeros_on([2, 4], &dev)], 0))),
                "cat",
                "[2, 4]",
            ),
            (Box::new(|| Tensor::try_cat(&[&a], 2)), Box::new(|| drop(Tensor::cat(&[&a], 2))), "cat", "2"),
            (Box::new(|| Tensor::try_cat(&[], 0)), Box::new(|| drop(Tensor::cat(&[], 0))), "cat", "at least one"),
            (
                Box::new(|| Tensor::try_stack(&[&a, &a.t()], 0)),
                Box::new(|| drop(Tensor::stack(&[&a, &a.t()], 0))),
                "stack",
                "[3, 2]",
            ),
        ];
        for (try_it, panic_it, op, arg) in cases {
            let err = try_it().expect_err(op).to_string();
            assert!(err.contains(op) && err.contains(arg), "{op}: {err}");
            let msg = panic_message(panic_it);
            assert_eq!(msg, err, "the panic says what the error says");
            if op != "cat" || arg != "at least one" {
                assert!(
                    msg.contains("[2, 3]") || msg.contains("[3]") || msg.contains("[2]"),
                    "{op} names the shape: {msg}"
                );
            }
        }
        // #[track_caller]: the panic location is this file's line.
        let location = std::sync::Arc::new(std::sync::Mutex::new(None));
        let loc = location.clone();
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *loc.lock().unwrap() = info.location().map(|l| (l.file().to_string(), l.line()));
        }));
        #[rustfmt::skip]
    let (line, _) = (line!(), catch_unwind(AssertUnwindSafe(|| drop(a.transpose(0, 7)))));
        std::panic::set_hook(hook);
        let (file, at) = location.lock().unwrap().clone().unwrap();
        assert!(file.ends_with("views.rs"), "panic located in {file}");
        assert_eq!(at, line);
    }
}
