//! What the engine does, read from `Stats`: fusion, submits, uploads, pipeline caching, buffer reuse, memory.

mod common;

use common::{assert_close, check, check_with, devices, expect, Rng};
use lazor::{Error, Tensor};

fn inputs(dev: &lazor::Device, n: usize, seed: u64) -> (Tensor, Tensor, Tensor) {
    let mut rng = Rng::new(seed);
    let mut t = || Tensor::from_vec_on(rng.vec(n, -2.0, 2.0), [n], dev);
    (t(), t(), t())
}

#[test]
fn chain3_is_one_dispatch_one_submit_and_reads_4_bytes_per_element() {
    for dev in devices() {
        let n = 1000;
        let (a, b, c) = inputs(&dev, n, 1);
        let d = ((&a + &b) * 5.0 - &c) / 2.0;
        check(&d, 1e-6, 1e-6, "chain3");
        let s = dev.stats();
        assert_eq!((s.realizes, s.submits, s.dispatches), (1, 1, 1));
        if !dev.is_cpu() {
            assert_eq!(s.bytes_downloaded, 4 * n as u64);
        }
        if !dev.is_cpu() {
            assert_eq!(s.bytes_uploaded, 3 * 4 * n as u64, "each input once");
        }

        // A new graph over the same inputs uploads nothing again.
        let e = (&a - &b) * &c;
        let want = lazor::reference::eval(&[&e]).pop().unwrap(); // reads a, b, c back: one submit
        let s = dev.stats();
        assert_close(&e.to_vec(), &want, 1e-6, 0.0, "second graph");
        let s2 = dev.stats();
        assert_eq!(s2.bytes_uploaded, s.bytes_uploaded);
        assert_eq!(s2.submits - s.submits, 1);
        assert_eq!(s2.dispatches - s.dispatches, 1);
    }
}

#[test]
fn a_realized_tensor_is_not_computed_again_and_feeds_later_graphs() {
    for dev in devices() {
        let (a, b, _) = inputs(&dev, 300, 2);
        let x = (&a * &b).exp();
        let first = x.to_vec();
        let s = dev.stats();
        assert_eq!(x.to_vec(), first);
        let s2 = dev.stats();
        assert_eq!(s2.dispatches, s.dispatches, "second to_vec computes nothing");
        assert_eq!(s2.bytes_uploaded, s.bytes_uploaded);
        let y = &x + 1.0;
        let got = y.to_vec();
        assert_close(&got, &first.iter().map(|v| v + 1.0).collect::<Vec<_>>(), 1e-6, 0.0, "x + 1");
        let k = dev.stats().dispatches - s2.dispatches;
        assert_eq!(k, 1, "one kernel, reading x's buffer");
    }
}

#[test]
fn pipelines_are_cached_on_structure_not_sizes_or_constants() {
    for dev in devices() {
        let run = |n: usize, k: f32| {
            let (a, b, c) = inputs(&dev, n, n as u64);
            let d = ((&a + &b) * k - &c) / 2.0;
            check(&d, 1e-6, 1e-6, "chain3");
        };
        run(100, 5.0);
        let s = dev.stats();
        if !dev.is_cpu() {
            assert_eq!(s.pipelines_compiled, 1);
        }
        run(100_000, 5.0);
        run(7, 6.0);
        let s2 = dev.stats();
        if !dev.is_cpu() {
            assert_eq!(s2.pipelines_compiled, 1, "new size and new constant compile nothing");
        }
        if !dev.is_cpu() {
            assert_eq!(s2.pipeline_cache_hits, 2);
        }
        // Broadcast shapes of another size, same rank, also share a pipeline.
        let bcast = |rows: usize, cols: usize| {
            let a = Tensor::ones_on([rows, cols], &dev);
            let b = Tensor::from_vec_on(vec![2.0; cols], [cols], &dev);
            let x = Tensor::from_vec_on(vec![3.0; rows * cols], [rows, cols], &dev);
            check(&(&x * &b + &a), 0.0, 0.0, "broadcast");
        };
        bcast(3, 4);
        let compiled = dev.stats().pipelines_compiled;
        bcast(17, 33);
        if !dev.is_cpu() {
            assert_eq!(dev.stats().pipelines_compiled, compiled);
        }
    }
}

#[test]
fn a_reused_plan_takes_its_pipelines_at_once() {
    for dev in devices() {
        let run = |k: f32| {
            let (a, b, c) = inputs(&dev, 1000, 3);
            let d = (((&a + &b) * k - &c).exp() * &a).sum(-1) + 1.0;
            check(&d, 1e-5, 1e-5, "sum of a chain");
        };
        run(0.5);
        let before = dev.stats();
        run(0.25);
        let s = dev.stats().since(&before);
        assert_eq!(s.plans_reused, 1, "the same structure with another constant");
        if dev.is_cpu() {
            assert_eq!(s.pipeline_family_hits, 0);
        } else {
            assert!(s.dispatches > 0);
            assert_eq!(s.pipeline_family_hits, s.dispatches, "every dispatch's pipeline from the plan's family");
            assert_eq!(s.pipelines_compiled, 0);
        }
    }
}

#[test]
fn a_repeated_structure_is_planned_once_and_each_realize_reads_its_own_inputs() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        let xs: Vec<Tensor> =
            (0..3).map(|_| Tensor::from_vec_on(rng.vec(64 * 48, -2.0, 2.0), [64, 48], &dev)).collect();
        for x in &xs {
            x.realize().unwrap();
        }
        let ln = |x: &Tensor, eps: f32| (x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + eps).sqrt();
        let want: Vec<Vec<f32>> = xs.iter().map(|x| lazor::reference::eval(&[&ln(x, 1e-5)]).pop().unwrap()).collect();
        let before = dev.stats();
        for (x, want) in xs.iter().zip(&want) {
            assert_close(&ln(x, 1e-5).to_vec(), want, 1e-5, 1e-5, "layer norm");
        }
        let after = dev.stats();
        assert_eq!(after.realizes - before.realizes, 3);
        assert_eq!(after.plans_reused - before.plans_reused, 2, "{}: planned once, reused twice", dev.name());
        assert_eq!(after.dispatches - before.dispatches, 3, "one kernel each");
        // Another constant: the same plan with the new value; another shape: planned anew. Both right.
        let y = Tensor::from_vec_on(rng.vec(64 * 50, -2.0, 2.0), [64, 50], &dev);
        for (t, reuses) in [(ln(&xs[1], 0.5), 1), (ln(&y, 1e-5), 0)] {
            let want = lazor::reference::eval(&[&t]).pop().unwrap();
            let reused = dev.stats().plans_reused;
            assert_close(&t.to_vec(), &want, 1e-5, 1e-5, "layer norm, new constant or shape");
            assert_eq!(dev.stats().plans_reused - reused, reuses, "{}", dev.name());
        }
    }
}

#[test]
fn a_repeated_realize_writes_no_parameters() {
    for dev in devices() {
        let run = |n: usize, k: f32, seed: u64| {
            let (a, b, c) = inputs(&dev, n, seed);
            let d = ((&a + &b) * k - &c) / 2.0;
            check(&d, 1e-6, 1e-6, "chain3");
        };
        run(1000, 5.0, 1);
        let first = dev.stats().param_uploads;
        // New values of the same shapes and constants: the same parameter block.
        run(1000, 5.0, 2);
        run(1000, 5.0, 3);
        assert_eq!(dev.stats().param_uploads, first, "{}: repeated parameters are reused", dev.name());
        // A new size or a new constant is a new block, on a GPU; the CPU backend uploads none.
        run(1001, 5.0, 4);
        run(1000, 6.0, 5);
        let expected = if dev.is_cpu() { 0 } else { first + 2 };
        assert_eq!(dev.stats().param_uploads, expected, "{}", dev.name());
        if !dev.is_cpu() {
            assert!(first >= 1);
        }
        // More distinct blocks than the cache keeps: evicted buffers are rewritten, every result stays right.
        for round in 0..2 {
            for k in 0..80 {
                run(500, k as f32 * 0.25, 100 * round + k);
            }
        }
    }
}

#[test]
fn nofuse_runs_one_kernel_per_op_with_two_intermediates_alive() {
    for dev in devices() {
        dev.set_fusion(false);
        let n = 4096;
        let bytes = 4 * n as u64;
        let x0 = Tensor::from_vec_on(vec![1.0; n], [n], &dev);
        x0.realize().unwrap();
        let base = dev.stats();
        let mut x = x0.clone();
        for i in 0..100 {
            x = if i % 2 == 0 { &x + 1.0 } else { &x * 1.0 };
        }
        let got = x.to_vec();
        assert!(got.iter().all(|&v| v == 51.0));
        let s = dev.stats();
        assert_eq!(s.dispatches - base.dispatches, 100);
        assert_eq!(s.submits - base.submits, 1);
        // Live at the peak: the input, the parameters, the output and one intermediate it reads; any more and
        // intermediates outlived their last use.
        let params = 100 * 256; // at most one aligned parameter block per kernel
        assert!(
            s.peak_buffer_bytes <= base.live_buffer_bytes + 2 * bytes + params as u64,
            "peak {} with {} live before",
            s.peak_buffer_bytes,
            base.live_buffer_bytes
        );
        if !dev.is_cpu() {
            assert!(s.buffers_allocated - base.buffers_allocated <= 4, "ping-pong reuses buffers");
        }
    }
}

#[test]
fn fusion_beats_nofuse_on_kernel_count() {
    for dev in devices() {
        let (a, b, c) = inputs(&dev, 5000, 3);
        let expr = |a: &Tensor| (((a + &b) * 1.01 - &c) / 1.02).tanh().relu();
        dev.set_fusion(false);
        let unfused = expr(&a).to_vec();
        let d0 = dev.stats().dispatches;
        assert_eq!(d0, 6);
        dev.set_fusion(true);
        let fused = expr(&a).to_vec();
        assert_eq!(dev.stats().dispatches - d0, 1);
        assert_close(&fused, &unfused, 1e-6, 1e-6, "fused vs unfused");
    }
}

#[test]
fn memory_stays_flat_over_10000_rounds() {
    for dev in devices() {
        let (a, b, _) = inputs(&dev, 64, 4);
        lazor::realize(&[&a, &b]).unwrap();
        let start = dev.stats();
        let mut live_after_warmup = 0;
        for round in 0..10_000 {
            {
                let c = (&a * 2.0 + &b).sqrt();
                let d = &c * &c;
                d.realize().unwrap();
            }
            if round == 10 {
                live_after_warmup = dev.stats().live_buffer_bytes;
            }
        }
        dev.synchronize().unwrap();
        let s = dev.stats();
        assert_eq!(s.live_buffer_bytes, live_after_warmup);
        if !dev.is_cpu() {
            // Independent realizes held in one batch (at most 64) get distinct buffers (`batch::settled`), so the
            // pool grows to about a batch's worth, however many rounds run.
            let allocated = s.buffers_allocated - start.buffers_allocated;
            assert!(allocated <= 64 + 4, "{}: {allocated} buffers for 10,000 rounds", dev.name());
        }
        assert_eq!(dev.live_nodes(), 2, "only a and b remain");
        if !dev.is_cpu() {
            assert_eq!(s.pipelines_compiled, 1);
        }
    }
}

#[test]
fn dropping_tensors_frees_their_buffers() {
    for dev in devices() {
        let before = dev.stats().live_buffer_bytes;
        {
            let (a, b, c) = inputs(&dev, 1 << 12, 5);
            let d = &a * &b + &c;
            d.realize().unwrap();
            assert!(dev.stats().live_buffer_bytes >= before + 4 * 4 * (1 << 12));
        }
        assert_eq!(dev.stats().live_buffer_bytes, before);
        assert_eq!(dev.live_nodes(), 0);
    }
}

#[test]
fn realizing_several_outputs_computes_shared_work_once() {
    for dev in devices() {
        let (a, b, _) = inputs(&dev, 777, 6);
        let shared = (&a * &b).exp();
        let x = &shared + 1.0;
        let y = &shared * 2.0;
        let want = lazor::reference::eval(&[&x, &y]);
        drop(shared);
        lazor::realize(&[&x, &y]).unwrap();
        let s = dev.stats();
        assert_eq!((s.submits, s.dispatches), (1, 1));
        let got = lazor::to_vecs(&[&x, &y]).unwrap();
        assert_close(&got[0], &want[0], 1e-5, 0.0, "x");
        assert_close(&got[1], &want[1], 1e-5, 0.0, "y");
        assert_eq!(dev.stats().dispatches, 1, "reading back computes nothing");
    }
}

#[test]
fn outputs_of_different_shapes_in_one_realize() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        let row = Tensor::from_vec_on(rng.vec(5, -1.0, 1.0), [5], &dev);
        let m = Tensor::from_vec_on(rng.vec(20, -1.0, 1.0), [4, 5], &dev);
        let small = row.exp();
        let big = &m * &small;
        let want = lazor::reference::eval(&[&small, &big]);
        let got = lazor::to_vecs(&[&small, &big]).unwrap();
        assert_close(&got[0], &want[0], 1e-6, 0.0, "small");
        assert_close(&got[1], &want[1], 1e-6, 0.0, "big");
        assert_eq!(dev.stats().dispatches, 2);
        assert_eq!(dev.stats().submits, 1);
    }
}

#[test]
fn empty_tensors_dispatch_nothing() {
    for dev in devices() {
        let a = Tensor::from_vec_on(Vec::<f32>::new(), [0, 3], &dev);
        let b = Tensor::from_vec_on(vec![1.0, 2.0, 3.0], [3], &dev);
        let c = (&a + &b).exp();
        assert_eq!(c.shape(), &[0, 3]);
        assert_eq!(c.to_vec(), Vec::<f32>::new());
        assert_eq!(Tensor::zeros_on([4, 0], &dev).to_vec(), Vec::<f32>::new());
        assert_eq!(dev.stats().dispatches, 0);
        assert_eq!(dev.stats().bytes_downloaded, 0);
    }
}

#[test]
fn a_100000_op_chain_realizes_in_equal_chunks_of_one_pipeline() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![0.5, -0.25, 1.0], [3], &dev);
        let mut x = a.clone();
        for i in 0..100_000 {
            x = if i % 2 == 0 { &x + 1.0 } else { &x - 1.0 };
        }
        let got = x.to_vec();
        assert_eq!(got, vec![0.5, -0.25, 1.0]);
        let s = dev.stats();
        // LAZOR_MAX_FUSED_OPS (256) ops per kernel; the chunks are alike, so they share one or two pipelines.
        assert_eq!(s.dispatches, 100_000usize.div_ceil(256) as u64);
        assert_eq!(s.submits, 1);
        if !dev.is_cpu() {
            assert!(s.pipelines_compiled <= 2, "{} compiled", s.pipelines_compiled);
        }
        drop(x);
        assert_eq!(dev.live_nodes(), 1);
    }
}

#[test]
fn a_chain_within_the_op_limit_is_one_kernel() {
    for dev in devices() {
        let (a, b, c) = inputs(&dev, 1000, 9);
        let mut x = a.clone();
        for _ in 0..50 {
            x = ((&x + &b) * 1.01 - &c) / 1.02;
        }
        check(&x, 1e-4, 1e-5, "200-op chain");
        assert_eq!(dev.stats().dispatches, 1);
    }
}

#[test]
fn kernels_split_at_the_binding_limit() {
    for dev in devices() {
        let mut rng = Rng::new(8);
        let parts: Vec<Tensor> = (0..80).map(|_| Tensor::from_vec_on(rng.vec(100, -1.0, 1.0), [100], &dev)).collect();
        let mut sum = parts[0].clone();
        for p in &parts[1..] {
            sum = &sum + p;
        }
        check(&sum, 1e-5, 1e-5, "sum of 80 tensors");
        let s = dev.stats();
        // lazor binds at most 64 buffers per kernel (fewer where the adapter allows fewer: 32 on lavapipe).
        assert!(s.dispatches >= 2, "80 inputs cannot bind in one kernel: {} dispatches", s.dispatches);
        assert_eq!(s.submits, 1);
    }
}

#[test]
fn more_than_65535_workgroups_fold_into_two_dimensions() {
    for dev in devices() {
        let n = 65_535 * 256 + 1000; // one workgroup too many in x, and not a multiple of 256
        let a = Tensor::from_vec_on((0..n).map(|i| (i % 1000) as f32).collect(), [n], &dev);
        // A broadcast operand makes the kernel strided, one element per thread: n threads, over 65535 workgroups.
        let two = Tensor::from_vec_on(vec![2.0], [1], &dev);
        let b = &a * &two + 1.0;
        let got = b.to_vec();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, (i % 1000) as f32 * 2.0 + 1.0, "element {i}");
        }
    }
}

#[test]
fn independent_kernels_share_dispatches_when_grouping_is_on() {
    for dev in devices() {
        let mut rng = Rng::new(11);
        let mut t = |dims: &[usize]| {
            let n = dims.iter().product();
            Tensor::from_vec_on(rng.vec(n, -2.0, 2.0), dims, &dev)
        };
        let (x, y, z, w) = (t(&[300, 257]), t(&[100, 33]), t(&[70, 513]), t(&[4099]));
        let pairs = || [[x.sum(1), (&w * 3.0).exp() - 1.0], [(&y * 2.0).max(0), z.softmax(-1)]];
        // Off (the default), each kernel has its dispatch; on, a row fold and a map share one, as do a column
        // fold and a softmax, none reading another.
        for (on, dispatches) in [(false, 2), (true, 1)] {
            dev.set_grouping(on);
            for outs in pairs() {
                let refs: Vec<&Tensor> = outs.iter().collect();
                let want = expect(&refs);
                let before = dev.stats();
                lazor::realize(&refs).unwrap();
                let after = dev.stats();
                let counts = (after.kernels - before.kernels, after.dispatches - before.dispatches);
                assert_eq!(counts, (2, dispatches), "{}: grouping {on}", dev.name());
                for (n, (o, w)) in outs.iter().zip(&want).enumerate() {
                    check_with(o, w, 1e-5, 1e-5, &format!("{}: grouping {on}, member {n}", dev.name()));
                }
            }
        }
        // Products run alone; a fold of a product waits for it, and three folds take two dispatches.
        let (a, b, c, d) = (t(&[70, 33]), t(&[33, 130]), t(&[129, 64]), t(&[64, 17]));
        let (p, q) = (a.matmul(&b), c.matmul(&d));
        let (r, s) = (p.sum(0), x.max(1));
        let u = y.sum(1);
        let outs = [&p, &q, &r, &s, &u];
        let want = expect(&outs);
        let before = dev.stats();
        lazor::realize(&outs).unwrap();
        let after = dev.stats();
        assert_eq!((after.kernels - before.kernels, after.dispatches - before.dispatches), (5, 4), "{}", dev.name());
        for (n, o) in outs.into_iter().enumerate() {
            check_with(o, &want[n], 1e-5, 1e-4, &format!("{}: output {n}", dev.name()));
        }
        // Past 65535 workgroups: a member's grid folds into two dimensions inside the group's.
        let n = 65_535 * 256 + 1000;
        let big = Tensor::from_vec_on((0..n).map(|i| (i % 1000) as f32).collect(), [n], &dev);
        let two = Tensor::from_vec_on(vec![2.0], [1], &dev);
        let (wide, small) = (&big * &two + 1.0, t(&[5000]).sum(0));
        let want = expect(&[&small]);
        let before = dev.stats();
        lazor::realize(&[&small, &wide]).unwrap();
        assert_eq!(dev.stats().dispatches - before.dispatches, 1, "{}", dev.name());
        check_with(&small, &want[0], 1e-5, 1e-4, "a fold beside 65,536 workgroups");
        for (i, v) in wide.to_vec().iter().enumerate() {
            assert_eq!(*v, (i % 1000) as f32 * 2.0 + 1.0, "element {i}");
        }
    }
}

#[test]
fn too_large_tensors_are_an_error_not_a_crash() {
    for dev in devices() {
        let elems = (dev.max_tensor_bytes() / 4 + 1) as usize;
        let big = Tensor::full_on([elems], 1.0, &dev).exp();
        match big.realize() {
            Err(Error::TooLarge { bytes, limit, .. }) => assert!(bytes > limit),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(big.try_to_vec().unwrap_err().to_string().contains("storage binding limit"));
        // The device still works.
        assert_eq!((Tensor::ones_on([2], &dev) * 3.0).to_vec(), vec![3.0, 3.0]);
    }
}

#[test]
fn constants_need_no_buffer_until_realized_alone() {
    for dev in devices() {
        let a = Tensor::from_vec_on(vec![1.0, 2.0], [2], &dev);
        let z = Tensor::zeros_on([2], &dev);
        let o = Tensor::full_on([2], 3.0, &dev);
        let got = (&a + &z) * &o;
        assert_eq!(got.to_vec(), vec![3.0, 6.0]);
        // Host memory to device memory: 8 bytes on a GPU; nothing moves on the CPU.
        let uploaded = if dev.is_cpu() { 0 } else { 8 };
        assert_eq!(dev.stats().bytes_uploaded, uploaded, "only a is uploaded");
    }
}

#[test]
fn the_cpu_backend_works_from_rayon_tasks() {
    use rayon::prelude::*;
    // Realizes inside rayon's own tasks: the backend must not wait on nested tasks that could re-enter the device.
    let cpu = lazor::Device::cpu();
    let got: Vec<f32> = (0..32)
        .into_par_iter()
        .map(|i| {
            let t = Tensor::from_vec_on(vec![i as f32 * 0.001; 50_000], [50_000], &cpu);
            ((&t * 2.0).exp() - 1.0).sum_all().to_scalar()
        })
        .collect();
    for (i, v) in got.iter().enumerate() {
        let want = 50_000.0 * ((i as f32 * 0.002).exp() - 1.0);
        assert!((v - want).abs() <= 1e-3 * want.abs().max(1.0), "task {i}: {v} vs {want}");
    }
}
