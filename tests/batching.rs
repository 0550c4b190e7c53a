//! Submit batching: realizes held back while the GPU is busy run later, in order, in one submit, and give the same
//! values as realizes submitted one by one. Queue depth 0 holds every realize back, so these tests are exact.

mod common;

use common::{assert_close, devices, Rng};
use lazor::{Device, Tensor};
use std::time::{Duration, Instant};

fn data(dev: &Device, n: usize, seed: u64) -> Tensor {
    Tensor::from_vec_on(Rng::new(seed).vec(n, -2.0, 2.0), [n], dev)
}

#[test]
fn held_back_realizes_run_in_one_submit_in_order() {
    for dev in devices() {
        let x = data(&dev, 5000, 1);
        x.realize().unwrap();
        dev.synchronize().unwrap();
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let before = dev.stats();
        // Each result reads the one before, so running them out of order would show.
        let mut results = vec![x.clone()];
        for i in 0..10 {
            let next = (results.last().unwrap() * 0.5 + i as f32).exp().sqrt();
            next.realize().unwrap();
            results.push(next);
        }
        let s = dev.stats();
        assert_eq!(s.dispatches - before.dispatches, 10, "{}", dev.name());
        if dev.is_cpu() {
            assert_eq!(dev.wgpu().map_or(0, |g| g.queue_depth()), 0, "the CPU backend holds nothing back");
            assert_eq!(s.submits - before.submits, 10);
        } else {
            assert_eq!(s.submits, before.submits, "{}: held back", dev.name());
        }
        let want = lazor::reference::eval(&results.iter().collect::<Vec<_>>());
        let got = lazor::to_vecs(&results.iter().collect::<Vec<_>>()).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, 1e-5, 1e-6, &format!("{}: result {i}", dev.name()));
        }
        if !dev.is_cpu() {
            // The reference's read of x and the read of every result: the held-back realizes went with the first.
            assert_eq!(dev.stats().submits - before.submits, 2, "{}", dev.name());
        }
    }
}

#[test]
fn an_upload_never_overtakes_a_held_back_realize_that_read_its_buffer() {
    for dev in devices() {
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let n = 4096;
        let x = data(&dev, n, 2);
        let xs = x.to_vec();
        let y = &x * 2.0;
        y.realize().unwrap();
        // x's buffer goes back to the pool while the kernel that reads it is held back; the upload below takes it.
        drop(x);
        let z = data(&dev, n, 3);
        let zs = z.to_vec();
        let w = (&y + &z).to_vec();
        for i in 0..n {
            assert_eq!(w[i], xs[i] * 2.0 + zs[i], "{}: element {i}", dev.name());
        }
    }
}

#[test]
fn parameter_blocks_evicted_across_batches_keep_each_realize_its_values() {
    for dev in devices() {
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let x = data(&dev, 300, 4);
        let xs = x.to_vec();
        // Distinct constants make distinct parameter blocks: more than the 64 cached, so blocks are evicted (and
        // new ones written) while later realizes are held back, over two batches of at most 64.
        let results: Vec<Tensor> = (0..100)
            .map(|i| {
                let t = &x + i as f32;
                t.realize().unwrap();
                t
            })
            .collect();
        let got = lazor::to_vecs(&results.iter().collect::<Vec<_>>()).unwrap();
        for (i, g) in got.iter().enumerate() {
            let want: Vec<f32> = xs.iter().map(|v| v + i as f32).collect();
            assert_eq!(g, &want, "{}: result {i}", dev.name());
        }
    }
}

#[test]
fn a_full_batch_is_submitted_without_a_read() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let x = data(&dev, 100, 5);
        x.realize().unwrap();
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let before = dev.stats().submits;
        let results: Vec<Tensor> = (0..64)
            .map(|_| {
                let t = x.exp();
                t.realize().unwrap();
                t
            })
            .collect();
        assert_eq!(dev.stats().submits - before, 1, "{}: 64 realizes make one batch", dev.name());
        let t = x.exp();
        t.realize().unwrap();
        assert_eq!(dev.stats().submits - before, 1, "{}: the next starts a new batch", dev.name());
        dev.flush();
        assert_eq!(dev.stats().submits - before, 2, "{}: flush submits it", dev.name());
        assert_eq!(results[63].to_vec(), t.to_vec());
    }
}

#[test]
fn the_device_submits_what_it_held_back_once_the_queue_has_room() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let x = data(&dev, 1000, 6);
        x.realize().unwrap();
        dev.synchronize().unwrap();
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let before = dev.stats().submits;
        let y = x.exp();
        y.realize().unwrap();
        assert_eq!(dev.stats().submits, before);
        // No lazor call that submits from here on: the device's own thread does, once the depth leaves room.
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(2);
        }
        let start = Instant::now();
        while dev.stats().submits == before {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{}: the held-back realize was never submitted",
                dev.name()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(dev.stats().submits - before, 1);
        let want = lazor::reference::eval(&[&y]).pop().unwrap();
        assert_close(&y.to_vec(), &want, 1e-6, 0.0, &dev.name());
    }
}

#[test]
fn taking_the_wgpu_queue_submits_what_is_held_back() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let y = data(&dev, 10, 7).exp();
        y.realize().unwrap();
        let before = dev.stats().submits;
        let _queue = dev.wgpu().expect("a wgpu device").queue();
        assert_eq!(dev.stats().submits - before, 1, "{}", dev.name());
    }
}

#[test]
fn a_busy_gpu_batches_realizes_and_an_idle_one_gets_each_at_once() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let depth = std::env::var("LAZOR_QUEUE_DEPTH").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(2);
        assert_eq!(dev.wgpu().map_or(0, |g| g.queue_depth()), depth, "{}: the default depth", dev.name());
        // Large enough that the GPU takes far longer over each realize than the host takes to make the next: a
        // software adapter is slow at any size, a hardware one needs 256 MiB a tensor (about 0.1 ms an H200).
        let n = if dev.adapter_info().device_type == wgpu::DeviceType::Cpu { 1 << 20 } else { 1 << 26 };
        let x = data(&dev, n, 8);
        x.realize().unwrap();
        dev.synchronize().unwrap();
        // Idle: a realize is submitted when it is made.
        let before = dev.stats().submits;
        let y = x.exp();
        y.realize().unwrap();
        assert_eq!(dev.stats().submits - before, 1, "{}", dev.name());
        drop(y);
        dev.synchronize().unwrap();
        // Busy: 32 realizes made one after another take fewer submits. Only the last result is kept.
        let before = dev.stats().submits;
        let mut last = None;
        for i in 0..32 {
            let t = (&x * (1.0 + i as f32 * 1e-3)).exp().sqrt();
            t.realize().unwrap();
            last = Some(t);
        }
        dev.synchronize().unwrap();
        let submits = dev.stats().submits - before;
        // A realize made while a submit is in flight is held; each batch holds what the host made while the one
        // before ran, so a few submits carry all 32 (3-6 seen on the H200 and on lavapipe). Half leaves room for
        // a host that plans slowly next to the GPU.
        assert!((1..=16).contains(&submits), "{}: {submits} submits", dev.name());
        let last = last.unwrap();
        let want = lazor::reference::eval(&[&last]).pop().unwrap();
        assert_close(&last.to_vec(), &want, 1e-5, 1e-6, &dev.name());
    }
}

#[test]
fn independent_realizes_of_one_batch_get_distinct_buffers_and_a_chain_reuses_two() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let x = data(&dev, 4096, 9);
        x.realize().unwrap();
        dev.synchronize().unwrap();
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        // Eight independent realizes in one batch, each result dropped at once: reusing the buffer just freed
        // would make each kernel wait for the one before (a barrier), so each gets its own.
        // One expression and constant throughout, so no new parameter block is allocated after the first.
        (&x * 2.0).exp().realize().unwrap();
        dev.synchronize().unwrap();
        let before = dev.stats();
        for _ in 0..8 {
            let y = (&x * 2.0).exp();
            y.realize().unwrap();
        }
        let s = dev.stats();
        assert_eq!(s.submits, before.submits, "{}: all held", dev.name());
        // The first takes the warm-up realize's buffer (an earlier batch used it); the other seven are new.
        assert_eq!(s.buffers_allocated - before.buffers_allocated, 7, "{}: one buffer each", dev.name());
        // A chain in the same batch waits for each link anyway, so it reuses what it frees.
        let mut z = x.clone();
        for _ in 0..8 {
            let next = (&z * 2.0).sin();
            next.realize().unwrap();
            z = next;
        }
        let chained = dev.stats().buffers_allocated - s.buffers_allocated;
        assert!(chained <= 2, "{}: a chain allocated {chained} buffers", dev.name());
        let want = lazor::reference::eval(&[&z]).pop().unwrap();
        assert_close(&z.to_vec(), &want, 1e-5, 1e-6, &format!("{}: the chain", dev.name()));
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(2);
        }
        // The next batch takes the buffers the last one used.
        let before = dev.stats().buffers_allocated;
        for _ in 0..8 {
            (&x * 2.0).exp().realize().unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().buffers_allocated, before, "{}: submitted buffers are reused", dev.name());
    }
}

#[test]
fn a_read_joins_the_held_batch_in_one_submit() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let (a, b) = (data(&dev, 256 * 256, 3).reshape([256, 256]), data(&dev, 256 * 256, 4).reshape([256, 256]));
        let y = || (a.t() + &b).relu();
        // Pipelines compiled first: a realize that compiles one submits what is held, so the GPU works meanwhile.
        let want = y().to_vec();
        (&a + 1.0).realize().unwrap();
        (&b * 2.0).realize().unwrap();
        dev.synchronize().unwrap();
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(0);
        }
        let before = dev.stats();
        (&a + 1.0).realize().unwrap();
        (&b * 2.0).realize().unwrap();
        assert_eq!(y().to_vec(), want);
        assert_eq!(dev.stats().submits - before.submits, 1, "{}: two realizes and a read", dev.name());
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(2);
        }
    }
}

/// Issue 24's sequence, short: different cases and sizes one after another in one process on one device, each
/// realized several times before one `synchronize` (pipelined, the default queue depth), twice over. Every
/// realize gives the reference's values, the repeats give the same bits, and the second pass allocates nothing.
#[test]
fn a_sequence_of_different_cases_in_one_process_gives_the_reference_values() {
    type Cell = (&'static str, Vec<Tensor>, fn(&[Tensor]) -> Tensor);
    for dev in devices() {
        let n = 1 << 16;
        let abc = [data(&dev, n, 11), data(&dev, n, 12), data(&dev, n, 13)];
        let x = Tensor::from_vec_on(Rng::new(14).vec(256 * 300, -1.0, 1.0), [256, 300], &dev);
        let (m, w) = (data(&dev, 96 * 96, 15).reshape([96, 96]), data(&dev, 96 * 96, 16).reshape([96, 96]));
        let all: Vec<&Tensor> = abc.iter().chain([&x, &m, &w]).collect();
        lazor::realize(&all).unwrap();
        let cells: [Cell; 6] = [
            ("chain3", abc.to_vec(), |t| ((&t[0] + &t[1]) * 5.0 - &t[2]) / 2.0),
            ("chain16", abc.to_vec(), |t| {
                let mut y = &t[0] + &t[1];
                for i in 0..14 {
                    y = if i % 2 == 0 { &y * 0.5 + &t[2] } else { (&y - 1.0).abs() };
                }
                y
            }),
            ("unary", abc.to_vec(), |t| ((&t[0] * 0.1).exp() + t[1].abs()).sqrt() * t[2].tanh()),
            ("sum(1)", vec![x.clone()], |t| t[0].sum(1)),
            ("matmul", vec![m.clone(), w.clone()], |t| t[0].matmul(&t[1])),
            ("matmul of a transpose", vec![m.clone(), w.clone()], |t| t[0].matmul(&t[1].t())),
        ];
        let mut allocated = 0;
        for pass in 0..2 {
            for (name, inputs, f) in &cells {
                let what = format!("{name}, pass {pass}, on {}", dev.name());
                let results: Vec<Tensor> = (0..4).map(|_| f(inputs)).collect();
                for r in &results {
                    r.realize().unwrap();
                }
                dev.synchronize().unwrap();
                let want = lazor::reference::eval(&[&results[0]]).remove(0);
                let got = lazor::to_vecs(&results.iter().collect::<Vec<_>>()).unwrap();
                assert_close(&got[0], &want, 1e-5, 1e-5, &what);
                assert!(got.iter().all(|g| g == &got[0]), "{what}: repeats differ");
            }
            if pass == 0 {
                allocated = dev.stats().buffers_allocated;
            }
        }
        assert_eq!(dev.stats().buffers_allocated, allocated, "{}: the second pass allocated", dev.name());
    }
}
